// Command launcher runs the project's real control plane for tests: etcd and kube-apiserver through
// controller-runtime's envtest, the upstream CRDs, JobSet's real controllers and webhooks in-process (and
// Trainer's with --chain), and kube-controller-manager. It writes an admin kubeconfig and a "ready" file
// into the state directory and runs until SIGTERM, then stops everything it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetcontrollers "sigs.k8s.io/jobset/pkg/controllers"
	jobsetwebhooks "sigs.k8s.io/jobset/pkg/webhooks"
)

type options struct {
	stateDir, crdsDir, manifestsDir string
	apiserver, etcd, kcm            string
	chain                           bool
	startTimeout                    time.Duration
}

// failure names the component that failed and the log that says why; run.sh shows it to the user.
type failure struct {
	component, log string
	err            error
}

func (f *failure) Error() string {
	return fmt.Sprintf("%s failed: %v (log: %s)", f.component, f.err, f.log)
}

func main() {
	exe, _ := os.Executable()
	home, _ := os.UserHomeDir()
	o := options{}
	flag.StringVar(&o.stateDir, "state-dir", envOr("KAI_FN_TESTBED_DIR", filepath.Join(home, ".cache", "kai-fn", "testbed")),
		"directory for the kubeconfig, pid and ready files, logs and etcd data")
	flag.StringVar(&o.crdsDir, "crds", os.Getenv("KAI_FN_CRDS_DIR"), "directory of CRD manifests to install")
	flag.StringVar(&o.manifestsDir, "manifests", filepath.Join(filepath.Dir(exe), "manifests"),
		"directory holding the upstream webhook kustomizations (jobset/, trainer/), copied there by build.sh")
	flag.StringVar(&o.apiserver, "kube-apiserver", "", "kube-apiserver binary")
	flag.StringVar(&o.etcd, "etcd", "", "etcd binary")
	flag.StringVar(&o.kcm, "kube-controller-manager", "", "kube-controller-manager binary")
	flag.BoolVar(&o.chain, "chain", false, "also run Trainer's controllers and webhooks in-process")
	flag.DurationVar(&o.startTimeout, "start-timeout", 3*time.Minute, "how long each component may take to start")
	flag.Parse()
	for name, v := range map[string]string{"--crds": o.crdsDir, "--kube-apiserver": o.apiserver, "--etcd": o.etcd,
		"--kube-controller-manager": o.kcm} {
		if v == "" {
			fmt.Fprintf(os.Stderr, "launcher: %s is required\n", name)
			os.Exit(2)
		}
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "launcher:", err)
		var f *failure
		if !errors.As(err, &f) {
			f = &failure{component: "launcher", log: filepath.Join(o.stateDir, "launcher.log"), err: err}
		}
		_ = os.WriteFile(filepath.Join(o.stateDir, "failure"), []byte(f.Error()+"\n"), 0o644)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	began := time.Now()
	step := func(what string) { fmt.Printf("launcher: %s (%s)\n", what, time.Since(began).Round(time.Second)) }
	if err := resetState(o.stateDir); err != nil {
		return err
	}
	// Our own pid, in case a wrapper (setsid) forked before exec-ing us.
	if err := os.WriteFile(filepath.Join(o.stateDir, "launcher.pid"), []byte(fmt.Sprintln(os.Getpid())), 0o644); err != nil {
		return err
	}
	logPath := func(c string) string { return filepath.Join(o.stateDir, c+".log") }
	etcdLog, err := os.Create(logPath("etcd"))
	if err != nil {
		return err
	}
	apiLog, err := os.Create(logPath("kube-apiserver"))
	if err != nil {
		return err
	}

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, jobsetv1alpha2.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	if o.chain {
		if err := addChainTypes(scheme); err != nil {
			return err
		}
	}

	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Path: o.apiserver, CertDir: filepath.Join(o.stateDir, "pki"),
				Out: apiLog, Err: apiLog},
			Etcd: &envtest.Etcd{Path: o.etcd, DataDir: filepath.Join(o.stateDir, "etcd"), Out: etcdLog, Err: etcdLog},
		},
		Scheme:                   scheme,
		CRDDirectoryPaths:        []string{o.crdsDir},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: o.startTimeout,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	env.CRDInstallOptions.MaxTime = o.startTimeout
	if err := loadWebhooks(filepath.Join(o.manifestsDir, "jobset"), "jobset-", &env.WebhookInstallOptions); err != nil {
		return &failure{"jobset webhooks", logPath("launcher"), err}
	}
	if o.chain {
		if err := loadWebhooks(filepath.Join(o.manifestsDir, "trainer"), "", &env.WebhookInstallOptions); err != nil {
			return &failure{"trainer webhooks", logPath("launcher"), err}
		}
	}

	if err := configureAudit(env.ControlPlane.APIServer, o.stateDir); err != nil {
		return err
	}
	step("starting etcd and kube-apiserver, then installing the CRDs of " + o.crdsDir)
	cfg, err := env.Start()
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "launcher: stopping envtest:", err)
		}
	}()
	if err != nil {
		return startFailure(err, logPath)
	}
	step("control plane up, CRDs served: " + cfg.Host)
	if err := writePids(o.stateDir, nil); err != nil {
		return err
	}
	kubeconfig := filepath.Join(o.stateDir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		return err
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    env.WebhookInstallOptions.LocalServingHost,
			Port:    env.WebhookInstallOptions.LocalServingPort,
			CertDir: env.WebhookInstallOptions.LocalServingCertDir,
		}),
	})
	if err != nil {
		return err
	}
	if err := setupJobSet(ctx, mgr); err != nil {
		return &failure{"jobset", logPath("launcher"), err}
	}
	if o.chain {
		if err := setupChain(ctx, mgr); err != nil {
			return &failure{"trainer", logPath("launcher"), err}
		}
	}
	mgrCtx, cancelMgr := context.WithCancel(ctx)
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	defer func() { cancelMgr(); <-mgrDone }()

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	// The probe JobSet is valid: with failurePolicy Fail it is accepted only once JobSet's webhooks answer.
	jobSetAccepted := func(err error) bool { return err == nil }
	if err := waitWebhookServed(ctx, c, probeJobSet(), jobSetAccepted, o.startTimeout); err != nil {
		return &failure{"jobset webhooks", logPath("launcher"), err}
	}
	if o.chain {
		if err := waitWebhookServed(ctx, c, probeTrainJob(), trainJobRefused, o.startTimeout); err != nil {
			return &failure{"trainer webhooks", logPath("launcher"), err}
		}
	}

	step("webhooks served")
	saKey := filepath.Join(env.ControlPlane.APIServer.CertDir, "sa-signer.key")
	kcm, err := startKCM(o.kcm, kubeconfig, saKey, logPath("kube-controller-manager"))
	if err != nil {
		return &failure{"kube-controller-manager", logPath("kube-controller-manager"), err}
	}
	kcmExited := make(chan error, 1)
	go func() { kcmExited <- kcm.Wait() }()
	defer stopProcess(kcm, kcmExited, 20*time.Second)
	if err := waitKCMWorking(ctx, c, kcmExited, o.startTimeout); err != nil {
		return &failure{"kube-controller-manager", logPath("kube-controller-manager"), err}
	}

	step("kube-controller-manager working")
	if err := writePids(o.stateDir, kcm); err != nil {
		return err
	}
	ready := fmt.Sprintf("api %s\nchain %t\n", env.Config.Host, o.chain)
	if err := os.WriteFile(filepath.Join(o.stateDir, "ready"), []byte(ready), 0o644); err != nil {
		return err
	}
	step("ready: kubeconfig " + kubeconfig)
	go restartAPIServerOnSignal(ctx, env.ControlPlane.APIServer, o.stateDir, func() { _ = writePids(o.stateDir, kcm) })

	select {
	case <-ctx.Done():
		fmt.Println("stopping")
		_ = os.Remove(filepath.Join(o.stateDir, "ready"))
		return nil
	case err := <-kcmExited:
		kcmExited <- err
		return &failure{"kube-controller-manager", logPath("kube-controller-manager"), fmt.Errorf("exited: %v", err)}
	case err := <-mgrDone:
		mgrDone <- err
		return &failure{"jobset", logPath("launcher"), fmt.Errorf("manager stopped: %v", err)}
	}
}

func setupJobSet(ctx context.Context, mgr ctrl.Manager) error {
	if err := jobsetcontrollers.SetupJobSetIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := jobsetcontrollers.SetupPodIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := jobsetcontrollers.NewJobSetReconciler(mgr.GetClient(), mgr.GetScheme(),
		mgr.GetEventRecorder("jobset")).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := jobsetcontrollers.NewPodReconciler(mgr.GetClient(), mgr.GetScheme(),
		mgr.GetEventRecorder("pod")).SetupWithManager(mgr); err != nil {
		return err
	}
	return jobsetwebhooks.Setup(mgr)
}

// probeJobSet is a minimal valid JobSet, created with dryRun=All.
func probeJobSet() client.Object {
	return &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: "testbed-probe", Namespace: metav1.NamespaceDefault},
		Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
			Name: "probe", Replicas: 1,
			Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			}}},
		}}},
	}
}

// waitWebhookServed retries a dry-run create of obj until answered(err) says the webhook answered. The
// last error is reported otherwise (a missing CRD shows up here as "no matches for kind").
func waitWebhookServed(ctx context.Context, c client.Client, obj client.Object, answered func(error) bool,
	timeout time.Duration) error {
	var last error
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = c.Create(ctx, obj.DeepCopyObject().(client.Object), client.DryRunAll)
		if meta.IsNoMatchError(last) {
			return false, fmt.Errorf("its CRD is not installed: %w", last)
		}
		return answered(last), nil
	})
	if err != nil && meta.IsNoMatchError(last) {
		return err
	}
	if err != nil {
		return fmt.Errorf("webhook not answering: %v", last)
	}
	return nil
}

func startFailure(err error, logPath func(string) string) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "etcd"):
		return &failure{"etcd", logPath("etcd"), err}
	case strings.Contains(msg, "CRD"):
		return &failure{"CRD install", logPath("launcher"), err}
	case strings.Contains(msg, "webhook"):
		return &failure{"webhook install", logPath("launcher"), err}
	default:
		return &failure{"kube-apiserver", logPath("kube-apiserver"), err}
	}
}

func resetState(dir string) error {
	for _, p := range []string{"pki", "etcd", "ready", "failure", "pids", "kubeconfig"} {
		if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Join(dir, "pki"), 0o700)
}

// writePids records every process the launcher started, for `cluster status` and `cluster down` (etcd and
// kube-apiserver run in process groups of their own).
func writePids(dir string, kcm *exec.Cmd) error {
	pids := childPIDs()
	pids["launcher"] = os.Getpid()
	delete(pids, "kube-controller")
	if kcm != nil {
		pids["kube-controller-manager"] = kcm.Process.Pid
	}
	names := make([]string, 0, len(pids))
	for n := range pids {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s %d\n", n, pids[n])
	}
	return os.WriteFile(filepath.Join(dir, "pids"), []byte(b.String()), 0o644)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
