package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// knativeObject is what Knative's webhooks require of a resource they admit.
type knativeObject interface {
	apis.Defaultable
	apis.Validatable
	metav1.Object
}

// kinds maps apiVersion/kind to a constructor of the API type the webhook would decode into.
var kinds = map[string]func() knativeObject{
	"serving.knative.dev/v1/Service":         func() knativeObject { return &servingv1.Service{} },
	"sources.knative.dev/v1/ApiServerSource": func() knativeObject { return &sourcesv1.ApiServerSource{} },
	"sources.knative.dev/v1/PingSource":      func() knativeObject { return &sourcesv1.PingSource{} },
	"eventing.knative.dev/v1/Broker":         func() knativeObject { return &eventingv1.Broker{} },
	"eventing.knative.dev/v1/Trigger":        func() knativeObject { return &eventingv1.Trigger{} },
}

// check admits one JSON document as on create and returns its report line and whether it failed.
func check(ctx context.Context, doc []byte) (string, bool) {
	var meta metav1.PartialObjectMetadata
	if err := json.Unmarshal(doc, &meta); err != nil {
		return fmt.Sprintf("error <unparsed>: %v", err), true
	}
	name := fmt.Sprintf("%s %s/%s", meta.Kind, meta.Namespace, meta.Name)
	newObj, ok := kinds[meta.APIVersion+"/"+meta.Kind]
	if !ok {
		return fmt.Sprintf("skip %s (%s)", name, meta.APIVersion), false
	}
	obj := newObj()
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields() // Knative's webhooks decode strictly
	if err := dec.Decode(obj); err != nil {
		return fmt.Sprintf("error %s: %v", name, err), true
	}
	ctx = apis.WithinCreate(ctx)
	obj.SetDefaults(ctx)
	if err := obj.Validate(ctx); err != nil {
		return fmt.Sprintf("error %s: %s", name, flatten(err)), true
	}
	return "ok " + name, false
}

func flatten(err *apis.FieldError) string {
	var b bytes.Buffer
	for i, e := range err.WrappedErrors() {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Error())
	}
	if b.Len() == 0 {
		return err.Error()
	}
	return b.String()
}
