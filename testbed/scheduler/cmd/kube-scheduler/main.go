// Command kube-scheduler is the upstream kube-scheduler with scheduler-plugins' Coscheduling plugin registered,
// so the chain has a real gang scheduler (the KAI scheduler module is not served).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	// Registers CoschedulingArgs in the scheduler's config scheme.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand(app.WithPlugin(coscheduling.Name, coscheduling.New))))
}
