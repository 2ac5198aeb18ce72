// Command simnodes makes sure the testbed's simulated GPU nodes exist: "4x8" means nodes <prefix>0..3, each with
// 8 nvidia.com/gpu plus cpu, memory and pods. Nodes are created Ready, marked for kwok (which runs their pods),
// and cleared of the not-ready taint that TaintNodesByCondition admission adds on create and no kubelet removes.
// Existing nodes are kept, so "4x8" after "3x8" adds the fourth node.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// KwokAnnotation=KwokValue marks the nodes kwok manages: start kwok with
// --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake.
// PoolLabel carries the name prefix (without its trailing "-"), so a workload can stay on one set of nodes.
const (
	KwokAnnotation = "kwok.x-k8s.io/node"
	KwokValue      = "fake"
	GPUResource    = "nvidia.com/gpu"
	PoolLabel      = "kai-fn.testbed/pool"
)

var specPattern = regexp.MustCompile(`^([0-9]+)x([0-9]+)$`)

// Spec is a parsed KAI_FN_TESTBED_NODES value.
type Spec struct{ Nodes, GPUs int }

func ParseSpec(s string) (Spec, error) {
	m := specPattern.FindStringSubmatch(s)
	if m == nil {
		return Spec{}, fmt.Errorf("KAI_FN_TESTBED_NODES=%q: want <nodes>x<gpus per node>, e.g. 4x8", s)
	}
	n, _ := strconv.Atoi(m[1])
	g, _ := strconv.Atoi(m[2])
	return Spec{Nodes: n, GPUs: g}, nil
}

// NewNode is a kubelet-less node: Ready, with whole GPUs as an extended resource.
func NewNode(pool, name string, gpus int) *corev1.Node {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
		GPUResource:           *resource.NewQuantity(int64(gpus), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname:   name,
				corev1.LabelOSStable:   "linux",
				corev1.LabelArchStable: "amd64",
				"type":                 "kwok",
				PoolLabel:              pool,
			},
			Annotations: map[string]string{KwokAnnotation: KwokValue},
		},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{
				Type:               corev1.NodeReady,
				Status:             corev1.ConditionTrue,
				Reason:             "KubeletReady",
				Message:            "simulated node",
				LastHeartbeatTime:  metav1.Now(),
				LastTransitionTime: metav1.Now(),
			}},
		},
	}
}

// Ensure creates the node unless it exists, then drops the not-ready taint.
func Ensure(ctx context.Context, client kubernetes.Interface, node *corev1.Node) error {
	nodes := client.CoreV1().Nodes()
	current, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		current, err = nodes.Get(ctx, node.Name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	kept := current.Spec.Taints[:0]
	for _, t := range current.Spec.Taints {
		if t.Key != corev1.TaintNodeNotReady {
			kept = append(kept, t)
		}
	}
	if len(kept) == len(current.Spec.Taints) {
		return nil
	}
	current.Spec.Taints = kept
	_, err = nodes.Update(ctx, current, metav1.UpdateOptions{})
	return err
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig of the testbed")
	prefix := flag.String("prefix", "gpu-node-", "node name prefix; nodes are <prefix>0, <prefix>1, ...")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: simnodes [-kubeconfig FILE] [-prefix P] [NODESxGPUS]  (default: $KAI_FN_TESTBED_NODES)")
	}
	flag.Parse()
	if err := run(*kubeconfig, *prefix, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "simnodes:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, prefix, arg string) error {
	if arg == "" {
		arg = os.Getenv("KAI_FN_TESTBED_NODES")
	}
	spec, err := ParseSpec(arg)
	if err != nil {
		return err
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	for i := range spec.Nodes {
		name := fmt.Sprintf("%s%d", prefix, i)
		if err := Ensure(context.Background(), client, NewNode(strings.TrimSuffix(prefix, "-"), name, spec.GPUs)); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		fmt.Println(name)
	}
	return nil
}
