// Command kube-scheduler is the upstream kube-scheduler with scheduler-plugins' Coscheduling plugin registered,
// so the chain has a real gang scheduler (the KAI scheduler module is not served).
package main

import (
	"context"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	// Registers CoschedulingArgs in the scheduler's config scheme.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand(app.WithPlugin(coscheduling.Name, newCoscheduling))))
}

// capacityEvents free or add room for a gang. Upstream Coscheduling wakes its rejected pods only on Pod add and
// PodGroup add/update; a gang its PreFilter turned away for want of minResources then waits for the periodic
// unschedulable flush (30 s at best) after a node is added or a bound pod deleted.
var capacityEvents = []fwk.ClusterEventWithHint{
	{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable}},
	{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}},
}

// gang is upstream Coscheduling, unchanged but for also requeueing its pods on capacityEvents.
type gang struct{ *coscheduling.Coscheduling }

func (g gang) EventsToRegister(ctx context.Context) ([]fwk.ClusterEventWithHint, error) {
	events, err := g.Coscheduling.EventsToRegister(ctx)
	return append(events, capacityEvents...), err
}

func newCoscheduling(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	p, err := coscheduling.New(ctx, args, h)
	if err != nil {
		return nil, err
	}
	return gang{p.(*coscheduling.Coscheduling)}, nil
}
