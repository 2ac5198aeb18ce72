package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// auditPolicy records every write at Metadata level (who, which verb, which resource), nothing else: enough to
// count API writes per component, cheap enough not to skew the timings it sits beside.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`

// configureAudit turns on the API server's audit log when KAI_FN_TESTBED_AUDIT_LOG names a file (the chain
// benchmark counts writes per component from it).
func configureAudit(api *envtest.APIServer, stateDir string) error {
	path := os.Getenv("KAI_FN_TESTBED_AUDIT_LOG")
	if path == "" {
		return nil
	}
	policy := filepath.Join(stateDir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	api.Configure().Set("audit-policy-file", policy).Set("audit-log-path", path).
		Set("audit-log-mode", "blocking").Set("audit-log-maxsize", "0")
	return nil
}

// restartAPIServerOnSignal kills kube-apiserver (SIGKILL, as a crash: a graceful stop waits out every open
// watch, 30 s here) and starts it again on SIGUSR1, on the same port, certificates and etcd, for the fault
// scenarios: every client sees the API server go away and come back. It writes "restarted <n>" into
// <state>/apiserver-restarts once the new one is healthy (or "failed <n>: why").
func restartAPIServerOnSignal(ctx context.Context, api *envtest.APIServer, stateDir string, after func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	defer signal.Stop(sig)
	record := filepath.Join(stateDir, "apiserver-restarts")
	_ = os.Remove(record)
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-sig:
		}
		fmt.Println("launcher: SIGUSR1: restarting kube-apiserver")
		status := fmt.Sprintf("restarted %d\n", n)
		if pid, ok := childPIDs()["kube-apiserver"]; ok {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := api.Stop(); err != nil {
			status = fmt.Sprintf("failed %d: stop: %v\n", n, err)
		} else if err := api.Start(); err != nil {
			status = fmt.Sprintf("failed %d: start: %v\n", n, err)
		}
		after()
		fmt.Print("launcher: kube-apiserver ", status)
		_ = os.WriteFile(record, []byte(status), 0o644)
	}
}
