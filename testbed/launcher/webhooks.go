package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// kustomization is the part of an upstream webhook kustomization.yaml we honour: its resources and its
// JSON 6902 patches, so the webhook configurations are the ones upstream installs (objectSelectors included).
type kustomization struct {
	Resources []string `json:"resources"`
	Patches   []struct {
		Path   string `json:"path"`
		Target struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"target"`
	} `json:"patches"`
}

// loadWebhooks reads the webhook configurations of an upstream kustomize directory, applies its patches,
// prefixes the names (two projects both call theirs "mutating-webhook-configuration", and envtest updates a
// configuration of the same name instead of adding one) and appends them to opts.
func loadWebhooks(dir, prefix string, opts *envtest.WebhookInstallOptions) error {
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return err
	}
	var k kustomization
	if err := yaml.Unmarshal(raw, &k); err != nil {
		return fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	for _, res := range k.Resources {
		docs, err := readDocs(filepath.Join(dir, res))
		if err != nil {
			return err
		}
		for _, doc := range docs {
			var meta struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				return err
			}
			for _, p := range k.Patches {
				if p.Target.Kind != meta.Kind || (p.Target.Name != "" && p.Target.Name != meta.Metadata.Name) {
					continue
				}
				if doc, err = applyPatch(doc, filepath.Join(dir, p.Path)); err != nil {
					return err
				}
			}
			switch meta.Kind {
			case "MutatingWebhookConfiguration":
				var c admissionv1.MutatingWebhookConfiguration
				if err := yaml.UnmarshalStrict(doc, &c); err != nil {
					return err
				}
				c.Name = prefix + c.Name
				opts.MutatingWebhooks = append(opts.MutatingWebhooks, &c)
			case "ValidatingWebhookConfiguration":
				var c admissionv1.ValidatingWebhookConfiguration
				if err := yaml.UnmarshalStrict(doc, &c); err != nil {
					return err
				}
				c.Name = prefix + c.Name
				opts.ValidatingWebhooks = append(opts.ValidatingWebhooks, &c)
			}
		}
	}
	return nil
}

func readDocs(path string) ([][]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if j, err := yaml.YAMLToJSON(doc); err == nil && string(j) != "null" {
			docs = append(docs, j)
		}
	}
}

func applyPatch(doc []byte, patchPath string) ([]byte, error) {
	raw, err := os.ReadFile(patchPath)
	if err != nil {
		return nil, err
	}
	pj, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, err
	}
	patch, err := jsonpatch.DecodePatch(pj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", patchPath, err)
	}
	out, err := patch.Apply(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", patchPath, err)
	}
	return out, nil
}
