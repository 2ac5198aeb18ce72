// Command mtping is Knative's multi-tenant PingSource adapter (knative.dev/eventing/cmd/mtping at the version in
// go.mod) with one option added for running out of cluster beside other servers: no health-probe server (upstream
// binds :8080 for it; see ../apiserver_receive_adapter). Everything else is upstream's main as it is.
package main

import (
	filteredFactory "knative.dev/pkg/client/injection/kube/informers/factory/filtered"
	"knative.dev/pkg/signals"

	"knative.dev/eventing/pkg/adapter/mtping"
	"knative.dev/eventing/pkg/adapter/v2"
	"knative.dev/eventing/pkg/auth"
	"knative.dev/eventing/pkg/eventingtls"
)

const component = "pingsource-mt-adapter"

func main() {
	sctx := signals.NewContext()
	ctx := mtping.NewDelayingContext(sctx, mtping.GetNoShutDownAfterValue())
	ctx = adapter.WithController(ctx, mtping.NewController)
	ctx = adapter.WithHAEnabled(ctx)
	ctx = adapter.WithHealthProbesDisabled(ctx) // the one addition
	ctx = adapter.WithConfigWatcherEnabled(ctx)
	ctx = adapter.WithConfiguratorOptions(ctx, []adapter.ConfiguratorOption{
		adapter.WithLoggerConfigurator(adapter.NewLoggerConfiguratorFromConfigMap(component)),
		adapter.WithObservabilityConfigurator(adapter.NewObservabilityConfiguratorFromConfigMap()),
		adapter.WithCloudEventsStatusReporterConfigurator(adapter.NewCloudEventsReporterConfiguratorFromConfigMap()),
	})
	ctx = filteredFactory.WithSelectors(ctx,
		auth.OIDCLabelSelector,
		eventingtls.TrustBundleLabelSelector,
	)
	adapter.MainWithContext(ctx, component, mtping.NewEnvConfig, mtping.NewAdapter)
}
