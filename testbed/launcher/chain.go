package main

import (
	"context"
	"fmt"
	"strings"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	trainercontroller "github.com/kubeflow/trainer/v2/pkg/controller"
	runtimecore "github.com/kubeflow/trainer/v2/pkg/runtime/core"
	trainerwebhooks "github.com/kubeflow/trainer/v2/pkg/webhooks"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// addChainTypes registers what Trainer's controllers read and write, as its own manager does.
func addChainTypes(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{trainer.AddToScheme, schedulerpluginsv1alpha1.AddToScheme,
		volcanov1beta1.AddToScheme} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// setupChain runs Trainer's runtimes, controllers and webhooks in the launcher's manager, the way Trainer's
// own integration framework does (nil configuration: upstream defaults).
func setupChain(ctx context.Context, mgr ctrl.Manager) error {
	runtimes, err := runtimecore.New(ctx, mgr.GetClient(), mgr.GetFieldIndexer(), nil)
	if err != nil {
		return err
	}
	if name, err := trainercontroller.SetupControllers(mgr, runtimes, ctrlcontroller.Options{}); err != nil {
		return fmt.Errorf("controller %s: %w", name, err)
	}
	if name, err := trainerwebhooks.Setup(mgr, runtimes); err != nil {
		return fmt.Errorf("webhook %s: %w", name, err)
	}
	return nil
}

// probeTrainJob names a runtime that does not exist, so only Trainer's validating webhook can refuse it.
func probeTrainJob() client.Object {
	return &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: "testbed-probe", Namespace: metav1.NamespaceDefault},
		Spec:       trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: "testbed-probe-absent"}},
	}
}

func trainJobRefused(err error) bool {
	return err != nil && strings.Contains(err.Error(), `admission webhook "validator.trainjob.trainer.kubeflow.org" denied`)
}
