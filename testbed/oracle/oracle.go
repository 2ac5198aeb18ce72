package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	schedulerpluginsv1alpha1ac "sigs.k8s.io/scheduler-plugins/pkg/generated/applyconfiguration/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	trainerruntime "github.com/kubeflow/trainer/v2/pkg/runtime"
	runtimecore "github.com/kubeflow/trainer/v2/pkg/runtime/core"
)

type podSet struct {
	Name     string            `json:"name"`
	Ancestor string            `json:"ancestor,omitempty"`
	Count    int32             `json:"count"`
	Requests map[string]string `json:"requests"`
}

type podGroup struct {
	MinMember              int32             `json:"minMember"`
	MinResources           map[string]string `json:"minResources"`
	ScheduleTimeoutSeconds *int32            `json:"scheduleTimeoutSeconds,omitempty"`
}

var scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(trainer.AddToScheme(s))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(s))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(s))
	utilruntime.Must(volcanov1beta1.AddToScheme(s))
	return s
}

// noIndex satisfies Trainer's set-up, which registers field indexes that only its watch handlers use.
type noIndex struct{}

func (noIndex) IndexField(context.Context, client.Object, string, client.IndexerFunc) error {
	return nil
}

// compute runs Trainer's runtime framework over one TrainJob and its runtime, held by a fake client.
func compute(ctx context.Context, d defaulter, req request) ([]podSet, *podGroup, error) {
	var trainJob trainer.TrainJob
	if err := decode(d, req.TrainJob, &trainJob); err != nil {
		return nil, nil, fmt.Errorf("trainJob: %w", err)
	}
	if trainJob.Namespace == "" {
		trainJob.Namespace = "default"
	}
	if trainJob.UID == "" {
		trainJob.UID = types.UID("00000000-0000-0000-0000-000000000000")
	}
	var kind struct{ Kind string }
	if err := json.Unmarshal(req.Runtime, &kind); err != nil {
		return nil, nil, fmt.Errorf("runtime: %w", err)
	}

	var (
		obj  client.Object
		spec trainer.TrainingRuntimeSpec
	)
	switch kind.Kind {
	case trainer.TrainingRuntimeKind:
		var r trainer.TrainingRuntime
		if err := decode(d, req.Runtime, &r); err != nil {
			return nil, nil, fmt.Errorf("runtime: %w", err)
		}
		if r.Namespace == "" {
			r.Namespace = trainJob.Namespace
		}
		obj, spec = &r, r.Spec
	case trainer.ClusterTrainingRuntimeKind:
		var r trainer.ClusterTrainingRuntime
		if err := decode(d, req.Runtime, &r); err != nil {
			return nil, nil, fmt.Errorf("runtime: %w", err)
		}
		obj, spec = &r, r.Spec
	default:
		return nil, nil, fmt.Errorf("runtime: kind %q is neither %s nor %s", kind.Kind, trainer.TrainingRuntimeKind, trainer.ClusterTrainingRuntimeKind)
	}

	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(obj).Build()
	rt, err := runtimecore.NewTrainingRuntime(ctx, c, noIndex{}, nil)
	if err != nil {
		return nil, nil, err
	}
	if kind.Kind == trainer.ClusterTrainingRuntimeKind {
		if rt, err = runtimecore.NewClusterTrainingRuntime(ctx, c, noIndex{}, nil); err != nil {
			return nil, nil, err
		}
	}

	info, err := rt.RuntimeInfo(trainJob.DeepCopy(), spec.Template, spec.MLPolicy, spec.PodGroupPolicy)
	if err != nil {
		return nil, nil, err
	}
	sets := podSets(info)

	objs, err := rt.NewObjects(ctx, trainJob.DeepCopy())
	if err != nil {
		return nil, nil, err
	}
	var pg *podGroup
	for _, o := range objs {
		if ac, ok := o.(*schedulerpluginsv1alpha1ac.PodGroupApplyConfiguration); ok && ac.Spec != nil {
			pg = &podGroup{
				MinMember:              *ac.Spec.MinMember,
				MinResources:           quantities(*ac.Spec.MinResources),
				ScheduleTimeoutSeconds: ac.Spec.ScheduleTimeoutSeconds,
			}
		}
	}
	return sets, pg, nil
}

func podSets(info *trainerruntime.Info) []podSet {
	out := make([]podSet, 0, len(info.TemplateSpec.PodSets))
	for _, ps := range info.TemplateSpec.PodSets {
		s := podSet{Name: ps.Name, Requests: quantities(ps.SinglePodRequests)}
		if ps.Count != nil {
			s.Count = *ps.Count
		}
		if ps.Ancestor != nil {
			s.Ancestor = *ps.Ancestor
		}
		out = append(out, s)
	}
	return out
}

func quantities(list corev1.ResourceList) map[string]string {
	out := make(map[string]string, len(list))
	names := make([]string, 0, len(list))
	for name := range list {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		q := list[corev1.ResourceName(name)]
		out[name] = q.String()
	}
	return out
}

func decode(d defaulter, raw []byte, into any) error {
	defaulted, err := d.apply(raw)
	if err != nil {
		return err
	}
	return json.Unmarshal(defaulted, into)
}
