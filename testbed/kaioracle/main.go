// Command kaioracle prints the PodGroup KAI Scheduler's own podgrouper (v0.17.0) makes for a TrainJob's pod: the
// reference kai_fn's owner metadata (kai_fn/core/owner_metadata.py) is tested against. It runs KAI's pod-owner walk,
// its plugins hub (TrainJob skipped for its JobSet, the JobSet grouper over the default grouper) and its PodGroup
// handler on a controller-runtime fake client holding the objects given, and adds no logic of its own but the one
// unexported step of KAI's pod controller (the pod's node-pool label, pkg/podgrouper/pod_controller.go).
//
// Input: JSON lines on stdin, each {"trainJob", "jobSet", "job", "pod", "priorityClasses": [names],
// "defaultsConfigured": bool, "defaults": ConfigMap data or null (no ConfigMap), "nodePoolLabelKey"}.
// Output: one JSON line per input line, {"podGroup": {...}, "trainJobTopOwnerMetadata": "..."} or {"error": "..."}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kai-scheduler/KAI-scheduler/pkg/apis/scheduling/v2alpha2"
	"github.com/kai-scheduler/KAI-scheduler/pkg/common/constants"
	"github.com/kai-scheduler/KAI-scheduler/pkg/podgrouper/podgroup"
	"github.com/kai-scheduler/KAI-scheduler/pkg/podgrouper/podgrouper"
	pluginshub "github.com/kai-scheduler/KAI-scheduler/pkg/podgrouper/podgrouper/hub"
	"github.com/kai-scheduler/KAI-scheduler/pkg/podgrouper/topowner"
)

// Where the defaults ConfigMap lives when configured: any name does, KAI takes both from its flags.
const defaultsName, defaultsNamespace = "kai-defaults", "kai-scheduler"

var ownerKinds = []schema.GroupVersionKind{
	{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"},
	{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"},
}

type request struct {
	TrainJob           map[string]any    `json:"trainJob"`
	JobSet             map[string]any    `json:"jobSet"`
	Job                json.RawMessage   `json:"job"`
	Pod                json.RawMessage   `json:"pod"`
	PriorityClasses    []string          `json:"priorityClasses"`
	DefaultsConfigured bool              `json:"defaultsConfigured"`
	Defaults           map[string]string `json:"defaults"`
	NodePoolLabelKey   string            `json:"nodePoolLabelKey"`
}

type response struct {
	PodGroup                 *v2alpha2.PodGroup `json:"podGroup,omitempty"`
	TrainJobTopOwnerMetadata string             `json:"trainJobTopOwnerMetadata,omitempty"`
	Error                    string             `json:"error,omitempty"`
}

func main() {
	ctrllog.SetLogger(logr.Discard())
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kaioracle:", err)
		os.Exit(2)
	}
}

func run(in io.Reader, out io.Writer) error {
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 0, 1<<20), 64<<20)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	for scanner.Scan() {
		if len(scanner.Bytes()) == 0 {
			continue
		}
		var resp response
		var req request
		if err := json.Unmarshal(scanner.Bytes(), &req); err != nil {
			resp.Error = fmt.Sprintf("input line: %v", err)
		} else if resp.PodGroup, resp.TrainJobTopOwnerMetadata, err = compute(scheme, req); err != nil {
			resp.Error = err.Error()
		}
		if err := enc.Encode(resp); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return scanner.Err()
}

// newScheme knows the built-in kinds, KAI's PodGroup, and TrainJob and JobSet as unstructured objects (KAI reads
// them so, and the oracle needs neither Trainer's nor JobSet's module).
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v2alpha2.AddToScheme(scheme); err != nil {
		return nil, err
	}
	for _, gvk := range ownerKinds {
		scheme.AddKnownTypeWithName(gvk, &unstructured.Unstructured{})
		scheme.AddKnownTypeWithName(gvk.GroupVersion().WithKind(gvk.Kind+"List"), &unstructured.UnstructuredList{})
	}
	return scheme, nil
}

func compute(scheme *runtime.Scheme, req request) (*v2alpha2.PodGroup, string, error) {
	ctx := context.Background()
	pod, job := &v1.Pod{}, &batchv1.Job{}
	if err := json.Unmarshal(req.Pod, pod); err != nil {
		return nil, "", fmt.Errorf("pod: %w", err)
	}
	if err := json.Unmarshal(req.Job, job); err != nil {
		return nil, "", fmt.Errorf("job: %w", err)
	}
	trainJob := &unstructured.Unstructured{Object: req.TrainJob}
	objects := []client.Object{pod, job, trainJob, &unstructured.Unstructured{Object: req.JobSet}}
	for _, name := range req.PriorityClasses {
		objects = append(objects, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	if req.Defaults != nil {
		objects = append(objects, &v1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: defaultsName, Namespace: defaultsNamespace}, Data: req.Defaults})
	}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).Build()
	name, namespace := "", ""
	if req.DefaultsConfigured {
		name, namespace = defaultsName, defaultsNamespace
	}
	hub := pluginshub.NewDefaultPluginsHub(kube, false, false, false, constants.DefaultQueueLabel,
		req.NodePoolLabelKey, name, namespace)
	grouper := podgrouper.NewPodgrouper(kube, kube, hub)
	top, owners, err := grouper.GetPodOwners(ctx, pod)
	if err != nil {
		return nil, "", fmt.Errorf("owners: %w", err)
	}
	metadata, err := grouper.GetPGMetadata(ctx, pod, top, owners)
	if err != nil {
		return nil, "", fmt.Errorf("metadata: %w", err)
	}
	if key := req.NodePoolLabelKey; key != "" { // pod_controller.go, addNodePoolLabel
		if metadata.Labels == nil {
			metadata.Labels = map[string]string{}
		}
		if value, found := pod.Labels[key]; found {
			if _, set := metadata.Labels[key]; !set {
				metadata.Labels[key] = value
			}
		}
	}
	if err := podgroup.NewHandler(kube, req.NodePoolLabelKey, constants.DefaultQueueLabel).ApplyToCluster(ctx, *metadata); err != nil {
		return nil, "", fmt.Errorf("apply: %w", err)
	}
	made := &v2alpha2.PodGroup{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: metadata.Namespace, Name: metadata.Name}, made); err != nil {
		return nil, "", fmt.Errorf("get: %w", err)
	}
	topMetadata := topowner.GetTopOwnerMetadata(trainJob)
	text, err := topMetadata.MarshalYAML()
	return made, text, err
}
