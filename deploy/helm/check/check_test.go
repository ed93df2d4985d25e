package check

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const chart = "../saltus"

// helm runs Helm with args; HELM names its binary.
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		t.Skip("HELM is not set (make helm-check sets it)")
	}
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, errors.New(err.Error() + ": " + stderr.String())
	}
	return out, nil
}

// serviceMonitor is the part of the Prometheus Operator's
// monitoring.coreos.com/v1 ServiceMonitor the chart writes (the operator's
// Go types would bring its module tree): decoded strictly too, so a
// misspelt field fails here rather than being dropped by the API server.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			Relabelings   []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// object returns a new object of the Go type of apiVersion and kind,
// and its metadata; false for a kind the chart is not expected to render.
func object(apiVersion, kind string) (any, func() *metav1.ObjectMeta, bool) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		o := new(corev1.ConfigMap)
		return o, func() *metav1.ObjectMeta { return &o.ObjectMeta }, true
	case "v1 Secret":
		o := new(corev1.Secret)
		return o, func() *metav1.ObjectMeta { return &o.ObjectMeta }, true
	case "v1 Service":
		o := new(corev1.Service)
		return o, func() *metav1.ObjectMeta { return &o.ObjectMeta }, true
	case "v1 ServiceAccount":
		o := new(corev1.ServiceAccount)
		return o, func() *metav1.ObjectMeta { return &o.ObjectMeta }, true
	case "apps/v1 Deployment":
		o := new(appsv1.Deployment)
		return o, func() *metav1.ObjectMeta { return &o.ObjectMeta }, true
	case "rbac.authorization.k8s.io/v1 Role":
		o := new(rbacv1.Role)
		return o, func() *metav1.ObjectMeta { return &o.ObjectMeta }, true
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		o := new(rbacv1.RoleBinding)
		return o, func() *metav1.ObjectMeta { return &o.ObjectMeta }, true
	case "policy/v1 PodDisruptionBudget":
		o := new(policyv1.PodDisruptionBudget)
		return o, func() *metav1.ObjectMeta { return &o.ObjectMeta }, true
	case "networking.k8s.io/v1 NetworkPolicy":
		o := new(networkingv1.NetworkPolicy)
		return o, func() *metav1.ObjectMeta { return &o.ObjectMeta }, true
	case "monitoring.coreos.com/v1 ServiceMonitor":
		o := new(serviceMonitor)
		return o, func() *metav1.ObjectMeta { return &o.ObjectMeta }, true
	}
	return nil, nil, false
}

// decodeStrict decodes one YAML document into obj as the API server
// would refuse it: repeated keys, unknown fields (case-sensitive), wrong
// types.
func decodeStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// checkRendered decodes every document of a rendering and returns the
// objects by "Kind name".
func checkRendered(t *testing.T, out []byte) map[string]any {
	t.Helper()
	objs := map[string]any{}
	r := utilyaml.NewYAMLReader(bufioReader(out))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if tm.Kind == "" {
			if len(bytes.TrimSpace(stripComments(doc))) > 0 {
				t.Errorf("a document without kind:\n%s", doc)
			}
			continue
		}
		obj, meta, ok := object(tm.APIVersion, tm.Kind)
		if !ok {
			t.Errorf("%s %s: not a kind the chart should render (or a new one: add it to object)", tm.APIVersion, tm.Kind)
			continue
		}
		if err := decodeStrict(doc, obj); err != nil {
			t.Errorf("%s: %v\n%s", tm.Kind, err, doc)
			continue
		}
		m := meta()
		id := tm.Kind + " " + m.Name
		if _, dup := objs[id]; dup {
			t.Errorf("%s twice", id)
		}
		objs[id] = obj
		nameErrs := validation.IsDNS1123Subdomain(m.Name)
		if tm.Kind == "Service" {
			nameErrs = validation.IsDNS1035Label(m.Name)
		}
		for _, e := range nameErrs {
			t.Errorf("%s: name: %s", id, e)
		}
		if m.Namespace == "" {
			t.Errorf("%s: no namespace", id)
		}
		for k, v := range m.Labels {
			for _, e := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
				t.Errorf("%s: label %s=%s: %s", id, k, v, e)
			}
		}
	}
	// What the API server would refuse beyond the types: the pod's
	// volumes and mounts agree, selectors match the template.
	for id, o := range objs {
		d, ok := o.(*appsv1.Deployment)
		if !ok {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			t.Errorf("%s: selector: %v", id, err)
		} else if !sel.Matches(labelSet(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not match the template's labels %v", id, sel, d.Spec.Template.Labels)
		}
		vols := map[string]bool{}
		for _, v := range d.Spec.Template.Spec.Volumes {
			vols[v.Name] = true
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					t.Errorf("%s: container %s mounts %s: no such volume", id, c.Name, m.Name)
				}
			}
			for _, p := range c.Ports {
				for _, e := range validation.IsValidPortName(p.Name) {
					t.Errorf("%s: port %s: %s", id, p.Name, e)
				}
			}
		}
	}
	return objs
}

// TestRendered: the chart with its default values and with each of
// ci/*.yaml renders only objects Kubernetes' types accept strictly.
func TestRendered(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chart, "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci/*.yaml values: %v", err)
	}
	runs := [][]string{nil}
	for _, f := range files {
		runs = append(runs, []string{"-f", f})
	}
	// The Secrets made from values (the pair's PEM is not read here).
	runs = append(runs, []string{"--set", "tls.enabled=true", "--set", "tls.cert=CERT", "--set", "tls.key=KEY",
		"--set", "cluster.key.value=AAAAAAAAAAAAAAAAAAAAAA==", "--set", "apiKeys.enabled=true",
		"--set-json", `apiKeys.keys=[{"name":"a","hash":"sha256:` + strings.Repeat("0", 64) + `"}]`})
	for _, args := range runs {
		out, err := helm(t, append([]string{"template", "rel", chart, "--namespace", "llm"}, args...)...)
		if err != nil {
			t.Errorf("helm template %q: %v", args, err)
			continue
		}
		objs := checkRendered(t, out)
		if _, ok := objs["Deployment rel-saltus"]; !ok {
			t.Errorf("helm template %q: no Deployment rel-saltus among %d objects", args, len(objs))
		}
	}
}

// TestBadValues: values.schema.json and the templates' checks refuse
// values that would not run, at helm template (so lint and install too).
func TestBadValues(t *testing.T) {
	cases := []struct {
		args []string
		want string // in Helm's error
	}{
		{[]string{"--set", "replicaCont=2"}, "replicaCont"},
		{[]string{"--set", "config.listen=0.0.0.0:1"}, "listen"},    // the chart's own key
		{[]string{"--set", "config.max-blokcs=10"}, "max-blokcs"},   // not saltus's
		{[]string{"--set", "config.max-blocks=lots"}, "max-blocks"}, // not an integer
		{[]string{"--set", "backends[0].url=vllm:8000"}, "url"},
		{[]string{"--set", "discovery.enabled=true"}, "discovery"},
		{[]string{"--set", "tls.enabled=true"}, "tls.existingSecret"},
		{[]string{"--set", "apiKeys.enabled=true"}, "apiKeys.existingSecret"},
		{[]string{"--set", "apiKeys.enabled=true", "--set", "apiKeys.keys[0].name=a", "--set", "apiKeys.keys[0].hash=secret"}, "hash"},
		{[]string{"--set", "ports.http=0"}, "http"},
		{[]string{"--set", "image.pullPolicy=Sometimes"}, "pullPolicy"},
	}
	for _, tc := range cases {
		_, err := helm(t, append([]string{"template", "rel", chart}, tc.args...)...)
		if err == nil {
			t.Errorf("helm template %q: no error", tc.args)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %q: %v; want it to name %s", tc.args, err, tc.want)
		}
	}
}

// TestDecodeStrict: the strict decoding refuses what it should (so the
// checks above can fail).
func TestDecodeStrict(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIp: None}\n",       // case
		"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {type: A, type: B}\n",      // repeated
		"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: http}]}\n", // type
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {replica: 3}\n",    // unknown
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec: {template: {spec: {containers: [{name: c, resources: {limits: {cpu: two}}}]}}}\n",
	} {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatal(err)
		}
		obj, _, _ := object(tm.APIVersion, tm.Kind)
		if err := decodeStrict([]byte(doc), obj); err == nil {
			t.Errorf("decodeStrict accepted %q", doc)
		}
	}
}
