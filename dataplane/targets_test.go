package dataplane

import (
	"slices"
	"strings"
	"testing"
)

func TestTargetsPins(t *testing.T) {
	t.Parallel()
	backends := []string{"gpu-a=http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000/"}
	pins := []string{"gpu-a=org/alpha", "gpu-a=alpha-tuned", "http://10.0.0.2:8000=org/beta", "http://10.0.0.3:8000=org/beta", "gpu-a=org/alpha"}
	ts := Targets(backends, pins)
	want := [][]string{{"org/alpha", "alpha-tuned"}, {"org/beta"}, {"org/beta"}}
	for i, tg := range ts {
		if !slices.Equal(tg.Models, want[i]) {
			t.Errorf("target %d (%s): models %v, want %v", i, tg.URL, tg.Models, want[i])
		}
	}
	if ts[0].Name != "gpu-a" || ts[1].Name != "" {
		t.Errorf("names %q %q", ts[0].Name, ts[1].Name)
	}
	if err := CheckBackendModels(backends, pins); err != nil {
		t.Errorf("valid pins refused: %v", err)
	}
	for _, tc := range []struct{ pin, want string }{
		{"gpu-b=m", `no configured backend is named "gpu-b"`},
		{"gpu-a=", "want BACKEND=MODEL"},
		{"=m", "want BACKEND=MODEL"},
		{"m", "want BACKEND=MODEL"},
	} {
		err := CheckBackendModels(backends, []string{tc.pin})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "backend-models[0]") {
			t.Errorf("%q: %v, want %q naming backend-models[0]", tc.pin, err, tc.want)
		}
	}
}
