package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kcmControllers are what envtest lacks: Job→Pod, ownerReference cascades, namespace deletion, and the
// "default" ServiceAccount of each namespace (with its legacy token controller, fed envtest's signing key);
// and volumes: the PersistentVolume binder (a claim binds to a PersistentVolume an admin made, as the
// volumeClaimPolicies of Trainer's torchtune runtimes need: KAI schedules a pod only once its claims are bound)
// and the protection controllers, which take the kubernetes.io/pvc-protection and pv-protection finalizers the API
// server's StorageObjectInUseProtection admission puts on every claim and volume (without them a deleted claim,
// and so its namespace, would stay Terminating).
const kcmControllers = "job-controller,garbage-collector-controller,namespace-controller," +
	"serviceaccount-controller,serviceaccount-token-controller," +
	"persistentvolume-binder-controller,persistentvolumeclaim-protection-controller," +
	"persistentvolume-protection-controller"

// startKCM runs kube-controller-manager against the admin kubeconfig. It dies with the launcher (Pdeathsig)
// so a killed launcher leaves no controller manager behind.
func startKCM(binary, kubeconfig, saKey, logPath string) (*exec.Cmd, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary,
		"--kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers="+kcmControllers,
		"--service-account-private-key-file="+saKey,
		"--concurrent-gc-syncs=5",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("kube-controller-manager: %w", err)
	}
	return cmd, nil
}

// waitKCMWorking waits until the serviceaccount controller has made the "default" ServiceAccount of
// kube-public: the controller manager is then connected, authorised and running its controllers.
func waitKCMWorking(ctx context.Context, c client.Client, exited <-chan error, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("kube-controller-manager exited: %v", err)
		default:
		}
		var sa corev1.ServiceAccount
		return c.Get(ctx, client.ObjectKey{Namespace: "kube-public", Name: "default"}, &sa) == nil, nil
	})
}

func stopProcess(cmd *exec.Cmd, exited <-chan error, grace time.Duration) {
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// childPIDs names the launcher's direct children (etcd and kube-apiserver run in process groups of their
// own, so `run.sh cluster down` needs their pids to be sure nothing outlives it).
func childPIDs() map[string]int {
	out := map[string]int{}
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		var pid int
		for _, f := range strings.Fields(string(raw)) {
			if _, err := fmt.Sscan(f, &pid); err != nil {
				continue
			}
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err == nil {
				out[strings.TrimSpace(string(comm))] = pid
			}
		}
	}
	return out
}
