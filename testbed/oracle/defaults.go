package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"sigs.k8s.io/yaml"
)

// defaulter applies the defaults of each Trainer kind's CRD schema, keyed by kind.
type defaulter map[string]*structuralschema.Structural

func loadDefaulter(dir string) (defaulter, error) {
	d := defaulter{}
	if dir == "" {
		return d, nil
	}
	paths, err := filepath.Glob(filepath.Join(dir, "trainer.kubeflow.org_*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no trainer.kubeflow.org_*.yaml in %s", dir)
	}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Name != "v1alpha1" || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			var internal apiextensionsinternal.JSONSchemaProps
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			s, err := structuralschema.NewStructural(&internal)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			d[crd.Spec.Names.Kind] = s
		}
	}
	return d, nil
}

// apply returns raw with the schema defaults of its kind filled in, as the API server stores it.
func (d defaulter) apply(raw []byte) ([]byte, error) {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	kind, _ := obj["kind"].(string)
	if s, ok := d[kind]; ok {
		defaulting.Default(obj, s)
	}
	return json.Marshal(obj)
}
