// Command knvalidate runs Knative's own admission logic over manifests: for every Service, ApiServerSource,
// PingSource, Broker and Trigger it decodes the object strictly, applies SetDefaults and then Validate(ctx), as
// Knative's defaulting and validating webhooks do on create. This catches what a CRD schema cannot (an
// ApiServerSource mode Knative rejects, a Trigger filter with an invalid attribute name).
//
// Usage: knvalidate [--config DIR] [FILE...]  (no FILE, or "-": stdin). Input is YAML, several documents allowed
// (kubectl kustomize output). One line per document: "ok", "skip" (not a Knative kind) or "error"; exit 1 on any
// error, 2 on unusable input. DIR (default: "config" beside the binary) holds Eventing's installed ConfigMaps.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func main() {
	exe, _ := os.Executable()
	configDir := flag.String("config", filepath.Join(filepath.Dir(exe), "config"), "directory of Eventing's ConfigMaps")
	flag.Parse()
	withConfig, err := loadConfig(*configDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "knvalidate:", err)
		os.Exit(2)
	}
	ctx := withConfig(context.Background())
	paths := flag.Args()
	if len(paths) == 0 {
		paths = []string{"-"}
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	failed := false
	for _, path := range paths {
		docs, err := readDocs(path)
		if err != nil {
			out.Flush()
			fmt.Fprintf(os.Stderr, "knvalidate: %s: %v\n", path, err)
			os.Exit(2)
		}
		for _, doc := range docs {
			line, bad := check(ctx, doc)
			failed = failed || bad
			fmt.Fprintln(out, line)
		}
	}
	if failed {
		out.Flush()
		os.Exit(1)
	}
}

func readDocs(path string) ([][]byte, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if string(j) != "null" {
			docs = append(docs, j)
		}
	}
}
