// Command podgroup-controller runs scheduler-plugins' PodGroup reconciler alone: it writes PodGroup status
// (phase, scheduled, running, succeeded, failed). Upstream's cmd/controller also runs the ElasticQuota reconciler,
// which needs a CRD the testbed does not install.
package main

import (
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	schedulingv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	"sigs.k8s.io/scheduler-plugins/pkg/controllers"
)

func main() {
	workers := flag.Int("workers", 2, "concurrent PodGroup reconciles")
	config.RegisterFlags(flag.CommandLine)
	logConfig := textlogger.NewConfig()
	logConfig.AddFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(textlogger.NewLogger(logConfig))

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		fail(err)
	}
	if err := schedulingv1alpha1.AddToScheme(scheme); err != nil {
		fail(err)
	}
	cfg, err := config.GetConfig()
	if err != nil {
		fail(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		fail(err)
	}
	reconciler := &controllers.PodGroupReconciler{Client: mgr.GetClient(), Scheme: scheme, Workers: *workers}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		fail(err)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fail(err)
	}
}

func fail(err error) {
	klog.ErrorS(err, "podgroup-controller")
	os.Exit(1)
}
