// Command apiserver_receive_adapter is Knative's ApiServerSource adapter
// (knative.dev/eventing/cmd/apiserver_receive_adapter at the version in go.mod) with one option added for running
// out of cluster beside other servers: no health-probe server. Upstream serves its probes on :8080
// (injection.HealthCheckDefaultPort, no flag or variable moves it); the only way to turn them off is the context
// option adapter.WithHealthProbesDisabled, which a pod never needs. Everything else is upstream's main as it is.
package main

import (
	filteredFactory "knative.dev/pkg/client/injection/kube/informers/factory/filtered"
	"knative.dev/pkg/signals"

	"knative.dev/eventing/pkg/adapter/apiserver"
	"knative.dev/eventing/pkg/adapter/v2"
	"knative.dev/eventing/pkg/auth"
	"knative.dev/eventing/pkg/eventingtls"
)

const component = "apiserversource"

func main() {
	ctx := signals.NewContext()
	ctx = adapter.WithInjectorEnabled(ctx)
	ctx = adapter.WithHealthProbesDisabled(ctx) // the one addition
	ctx = filteredFactory.WithSelectors(ctx,
		auth.OIDCLabelSelector,
		eventingtls.TrustBundleLabelSelector,
	)
	adapter.MainWithContext(ctx, component, apiserver.NewEnvConfig, apiserver.NewAdapter)
}
