package main

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestParseSpecAcceptsNodesTimesGPUsOnly(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
		ok   bool
	}{
		{"4x8", Spec{Nodes: 4, GPUs: 8}, true},
		{"1x0", Spec{Nodes: 1, GPUs: 0}, true},
		{"12x16", Spec{Nodes: 12, GPUs: 16}, true},
		{"", Spec{}, false},
		{"4", Spec{}, false},
		{"4X8", Spec{}, false},
		{"4x8x2", Spec{}, false},
		{"-1x8", Spec{}, false},
		{" 4x8", Spec{}, false},
	} {
		got, err := ParseSpec(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestEnsureCreatesOnceAndClearsOnlyTheNotReadyTaint(t *testing.T) {
	ctx := context.Background()
	keep := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	existing := NewNode("gpu-node", "gpu-node-0", 4)
	existing.Spec.Taints = []corev1.Taint{
		{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}, keep,
	}
	client := fake.NewClientset(existing)

	for _, node := range []*corev1.Node{NewNode("gpu-node", "gpu-node-0", 8), NewNode("gpu-node", "gpu-node-1", 8)} {
		if err := Ensure(ctx, client, node); err != nil {
			t.Fatalf("Ensure(%s): %v", node.Name, err)
		}
	}

	kept, err := client.CoreV1().Nodes().Get(ctx, "gpu-node-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := kept.Status.Allocatable[GPUResource]; got.Value() != 4 {
		t.Errorf("an existing node was replaced: %s GPUs, want its own 4", got.String())
	}
	if len(kept.Spec.Taints) != 1 || kept.Spec.Taints[0] != keep {
		t.Errorf("taints = %v, want only %v", kept.Spec.Taints, keep)
	}
	created, err := client.CoreV1().Nodes().Get(ctx, "gpu-node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Annotations[KwokAnnotation] != KwokValue || created.Labels[PoolLabel] != "gpu-node" {
		t.Errorf("new node not marked for kwok and its pool: labels %v annotations %v", created.Labels, created.Annotations)
	}
}
