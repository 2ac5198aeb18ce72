package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	eventingconfig "knative.dev/eventing/pkg/apis/config"
	"knative.dev/eventing/pkg/apis/feature"
	"sigs.k8s.io/yaml"
)

// loadConfig reads the ConfigMaps Eventing's webhook keeps in its context (config-br-defaults and config-features
// of knative-eventing: build.sh copies the ones Eventing installs) and returns what puts them into a context.
// Without them, the webhook's own fall-backs apply. Serving ships only commented examples: its defaults are built in.
func loadConfig(dir string) (func(context.Context) context.Context, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var opts []func(context.Context) context.Context
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal(raw, &cm); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if cm.Kind != "ConfigMap" || cm.Namespace != "knative-eventing" {
			continue
		}
		switch cm.Name {
		case eventingconfig.DefaultsConfigName:
			defaults, err := eventingconfig.NewDefaultsConfigFromConfigMap(&cm)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			opts = append(opts, func(ctx context.Context) context.Context {
				return eventingconfig.ToContext(ctx, &eventingconfig.Config{Defaults: defaults})
			})
		case feature.FlagsConfigName:
			flags, err := feature.NewFlagsConfigFromConfigMap(&cm)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			opts = append(opts, func(ctx context.Context) context.Context { return feature.ToContext(ctx, flags) })
		}
	}
	return func(ctx context.Context) context.Context {
		for _, o := range opts {
			ctx = o(ctx)
		}
		return ctx
	}, nil
}
