package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestK8sModelSelectorConfig: --k8s-model-selector takes one whole entry
// per use (a selector's commas are not separators), the YAML key a list,
// flags replace the file's list; discovery k8s accepts selectors without
// a Service, and each error names the key.
func TestK8sModelSelectorConfig(t *testing.T) {
	t.Parallel()
	load := func(args ...string) (serveConfig, error) {
		return loadServeConfigArgs(t, args)
	}
	cfg, err := load("--discovery", "k8s", "--k8s-model-selector", "llama=app=vllm,tier=a", "--k8s-model-selector", " qwen=tier in (a,b) ")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"llama=app=vllm,tier=a", "qwen=tier in (a,b)"}; !slices.Equal(cfg.K8s.ModelSelectors, want) {
		t.Errorf("flags: %q, want %q", cfg.K8s.ModelSelectors, want)
	}

	file := filepath.Join(t.TempDir(), "saltus.yaml")
	if err := os.WriteFile(file, []byte("discovery: k8s\nk8s-service: vllm\nk8s-model-selector:\n  - llama=app=vllm,tier=a\n  - qwen=app=qwen\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err = load("--config", file); err != nil || !slices.Equal(cfg.K8s.ModelSelectors, []string{"llama=app=vllm,tier=a", "qwen=app=qwen"}) || cfg.K8s.Service != "vllm" {
		t.Errorf("file: %q %q, %v", cfg.K8s.Service, cfg.K8s.ModelSelectors, err)
	}
	if cfg, err = load("--config", file, "--k8s-model-selector", "mistral=app=m"); err != nil || !slices.Equal(cfg.K8s.ModelSelectors, []string{"mistral=app=m"}) {
		t.Errorf("a flag over the file: %q, %v", cfg.K8s.ModelSelectors, err)
	}

	// --dry-run writes the list back, each entry whole.
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "--dry-run", "--discovery", "k8s", "--k8s-model-selector", "llama=app=vllm,tier=a"}, nil, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "\nk8s-model-selector:\n  - llama=app=vllm,tier=a\n") {
		t.Errorf("dry-run: %d %s\n%s", code, errb.String(), out.String())
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--k8s-model-selector", "llama=app=vllm"}, "config: k8s-model-selector: needs discovery: k8s"},
		{[]string{"--discovery", "k8s"}, "Service (--k8s-service) or ModelSelectors (--k8s-model-selector) is required"},
		{[]string{"--discovery", "k8s", "--k8s-model-selector", "llama"}, `ModelSelectors (--k8s-model-selector) entry 1 "llama": want MODEL=SELECTOR`},
		{[]string{"--discovery", "k8s", "--k8s-service", "vllm", "--k8s-model-selector", "llama=app=vllm", "--k8s-model-selector", "qwen=app=q\tr"},
			`ModelSelectors (--k8s-model-selector) entry 2 "qwen=app=q\tr": the selector must be printable ASCII`},
	} {
		if _, err := load(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// loadServeConfigArgs is loadServeConfig of args, its flag errors
// discarded.
func loadServeConfigArgs(t *testing.T, args []string) (serveConfig, error) {
	t.Helper()
	cfg, _, err := loadServeConfig(args, io.Discard)
	return cfg, err
}
