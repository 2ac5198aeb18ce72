// Command oracle prints what Kubeflow Trainer's own code computes for a TrainJob and its runtime: the pod sets
// (name, count, per-pod requests) and the coscheduling PodGroup. It is the reference kai_fn's planner is tested
// against, so it calls Trainer's runtime framework (TrainingRuntime.RuntimeInfo and NewObjects with every
// upstream plugin) and adds no arithmetic of its own.
//
// Input: JSON lines on stdin, each {"trainJob": {...}, "runtime": {...}} where runtime is a TrainingRuntime or a
// ClusterTrainingRuntime. Output: one JSON line per input line, {"podSets": [...], "podGroup": {...}} or
// {"error": "..."}. --crds names a directory of Trainer CRDs whose schema defaults are applied first, as the
// API server would before Trainer ever sees the objects.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

type request struct {
	TrainJob json.RawMessage `json:"trainJob"`
	Runtime  json.RawMessage `json:"runtime"`
}

type response struct {
	PodSets  []podSet  `json:"podSets,omitempty"`
	PodGroup *podGroup `json:"podGroup,omitempty"`
	Error    string    `json:"error,omitempty"`
}

func main() {
	crds := flag.String("crds", "", "directory holding the Trainer CRDs (trainer.kubeflow.org_*.yaml) whose defaults apply")
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if err := run(*crds, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "oracle:", err)
		os.Exit(2)
	}
}

func run(crdDir string, in io.Reader, out io.Writer) error {
	defaulter, err := loadDefaulter(crdDir)
	if err != nil {
		return err
	}
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 0, 1<<20), 64<<20)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	for scanner.Scan() {
		if len(scanner.Bytes()) == 0 {
			continue
		}
		var resp response
		var req request
		if err := json.Unmarshal(scanner.Bytes(), &req); err != nil {
			resp.Error = fmt.Sprintf("input line: %v", err)
		} else if sets, pg, err := safeCompute(defaulter, req); err != nil {
			resp.Error = err.Error()
		} else {
			resp.PodSets, resp.PodGroup = sets, pg
		}
		if err := enc.Encode(resp); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return scanner.Err()
}

// safeCompute turns a panic in Trainer's code (it trusts the API server's defaults, e.g. scheduleTimeoutSeconds)
// into that case's error, so one odd input does not end a batch.
func safeCompute(d defaulter, req request) (sets []podSet, pg *podGroup, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("trainer panicked: %v", r)
		}
	}()
	return compute(context.Background(), d, req)
}
