package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"maps"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const helmChart = "../../deploy/helm/saltus"

// helmChartKeys are the saltus.yaml keys the chart sets from its own
// values (templates/_helpers.tpl, "saltus.config", and the Deployment's
// args), or keeps unset because the pod could not work with them: the
// probes send no admin token and speak plain HTTP to the admin listener.
// values.schema.json refuses them under config.
func helmChartKeys() []string {
	return []string{
		"listen", "admin-listen", "drain-timeout", "state-dir", "node-name",
		"tls-cert-file", "tls-key-file", "api-keys-file",
		"backends", "backend-models", "backend-max-concurrency", "backend-priority",
		"discovery", "k8s-service", "k8s-namespace", "k8s-port-name", "k8s-kubeconfig", "k8s-model-selector",
		"cluster-bind", "cluster-advertise", "join", "cluster-key-file",
		"admin-token", "admin-tls-cert-file", "admin-tls-key-file", "admin-tls-client-ca-file",
	}
}

// helmConfigSchema is what values.schema.json says of config's keys: every
// key of saltus serve but the chart's and the deprecated ones, typed as
// its YAML decoder wants it (null: left out, saltus's default).
func helmConfigSchema(t *testing.T) map[string]any {
	t.Helper()
	props := map[string]any{}
	for _, k := range serveKeys {
		if k.deprecated || slices.Contains(helmChartKeys(), k.key) {
			continue
		}
		var cfg serveConfig
		var p map[string]any
		switch v := k.bind(&cfg).(type) {
		case strV, durV:
			p = map[string]any{"type": []any{"string", "null"}}
		case intV:
			p = map[string]any{"type": []any{"integer", "null"}}
		case boolV:
			p = map[string]any{"type": []any{"boolean", "null"}}
		case floatV:
			p = map[string]any{"type": []any{"number", "null"}}
		case sizeV, size64V:
			p = map[string]any{"type": []any{"string", "integer", "null"}}
		case listV:
			p = map[string]any{"type": []any{"array", "null"}, "items": map[string]any{"type": "string"}}
		default:
			t.Fatalf("key %s: no JSON schema type for %T", k.key, v)
		}
		p["description"] = strings.ReplaceAll(k.help, "`", "")
		props[k.key] = p
	}
	return props
}

// TestHelmSchemaConfig: the chart's values.schema.json lists under config
// exactly the keys saltus has and the chart does not set, with their
// types, so a misspelt or mistyped key fails helm lint and install, not
// the pods. SALTUS_UPDATE_HELM_SCHEMA=1 rewrites that part of the file.
func TestHelmSchemaConfig(t *testing.T) {
	t.Parallel()
	for _, k := range helmChartKeys() {
		if !slices.ContainsFunc(serveKeys, func(s serveKey) bool { return s.key == k }) {
			t.Errorf("helmChartKeys: saltus has no key %q", k)
		}
	}
	path := filepath.Join(helmChart, "values.schema.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	config, _ := schema["properties"].(map[string]any)["config"].(map[string]any)
	if config == nil {
		t.Fatalf("%s: no properties.config", path)
	}
	// Round trip, so that the comparison sees JSON's types.
	want := map[string]any{}
	b, _ := json.Marshal(helmConfigSchema(t))
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("SALTUS_UPDATE_HELM_SCHEMA") != "" {
		config["properties"] = want
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false) // the help texts' <id>, &
		enc.SetIndent("", "  ")
		if err := enc.Encode(schema); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, _ := config["properties"].(map[string]any)
	for k := range want {
		if !reflect.DeepEqual(got[k], want[k]) {
			t.Errorf("%s: config.%s is %v, want %v", path, k, got[k], want[k])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: config.%s: not a key saltus has, or one the chart sets", path, k)
		}
	}
	if config["additionalProperties"] != false {
		t.Errorf("%s: config allows other keys", path)
	}
	if t.Failed() {
		t.Log("SALTUS_UPDATE_HELM_SCHEMA=1 go test -run TestHelmSchemaConfig ./cmd/saltus rewrites it")
	}
}

// TestHelmChart renders the chart with Helm (HELM: its binary; make
// helm-check builds it and sets it) with the default values and with
// ci/*.yaml, and checks what a cluster would run: the Deployment's args
// and the ConfigMap's saltus.yaml, with the Secrets' files, load through
// saltus's config loader as the pod would read them, and agree with the
// container's ports, probes and volumes; the Services, RBAC, PDB,
// NetworkPolicy and ServiceMonitor select and name what exists; the
// values asked for are in the config (TLS, keys, discovery, cluster).
// deploy/helm/check decodes the same output against Kubernetes' types.
func TestHelmChart(t *testing.T) {
	helm := os.Getenv("HELM")
	if helm == "" {
		t.Skip("HELM is not set (make helm-check sets it)")
	}
	dir := t.TempDir()
	certPEM, keyPEM := testCertPEM(t)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := errors.Join(os.WriteFile(certFile, certPEM, 0o600), os.WriteFile(keyFile, keyPEM, 0o600)); err != nil {
		t.Fatal(err)
	}
	// The Secrets ci/full-values.yaml names but does not make.
	existing := map[string]map[string][]byte{
		"saltus-tls":         {"tls.crt": certPEM, "tls.key": keyPEM},
		"saltus-cluster-key": {"cluster.key": []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)) + "\n")},
	}
	type want = helmRendered
	cases := []struct {
		name string
		args []string
		want want
	}{
		{"default", nil, want{cluster: true}},
		{"full", []string{"-f", filepath.Join(helmChart, "ci/full-values.yaml")},
			want{tls: true, keys: true, discovery: true, cluster: true, clusterKey: true, serviceMonitor: true, dashboard: true}},
		{"minimal", []string{"-f", filepath.Join(helmChart, "ci/minimal-values.yaml")}, want{}},
		// The Secrets from the values: the pair from files, keys and
		// cluster key inline.
		{"secrets-from-values", []string{"--set", "tls.enabled=true", "--set-file", "tls.cert=" + certFile, "--set-file", "tls.key=" + keyFile,
			"--set", "apiKeys.enabled=true", "--set-json", `apiKeys.keys=[{"name":"a","hash":"sha256:` + strings.Repeat("ab", 32) + `","rpm":60}]`,
			"--set", "cluster.key.value=" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 16)),
			"--set", "discovery.enabled=true", "--set", "discovery.service=vllm"},
			want{tls: true, keys: true, discovery: true, cluster: true, clusterKey: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"template", "rel", helmChart, "--namespace", "llm"}, tc.args...)
			cmd := exec.Command(helm, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
			}
			file := filepath.Join(t.TempDir(), "rendered.yaml")
			if err := os.WriteFile(file, out, 0o644); err != nil {
				t.Fatal(err)
			}
			if got := checkHelmRelease(t, loadManifests(t, file), "llm", existing); got != tc.want {
				t.Errorf("the release turned on %+v, want %+v", got, tc.want)
			}
		})
	}
}

// helmRendered is what a release turned on, as TestHelmChart reads it.
type helmRendered struct{ tls, keys, discovery, cluster, clusterKey, serviceMonitor, dashboard bool }

// checkHelmRelease checks one release's objects (see TestHelmChart);
// existing holds the Secrets the values name but the chart does not make.
func checkHelmRelease(t *testing.T, docs []k8sDoc, ns string, existing map[string]map[string][]byte) (got helmRendered) {
	t.Helper()
	byKind := map[string][]k8sDoc{}
	seen := map[string]bool{}
	for _, d := range docs {
		if d.APIVersion == "" || d.Kind == "" || d.Metadata.Name == "" {
			t.Errorf("%v: no apiVersion, kind or name", d)
			continue
		}
		byKind[d.Kind] = append(byKind[d.Kind], d)
		id := d.Kind + " " + d.Metadata.Namespace + "/" + d.Metadata.Name
		if seen[id] {
			t.Errorf("%s twice", id)
		}
		seen[id] = true
		if d.Metadata.Labels["app.kubernetes.io/instance"] != "rel" || d.Metadata.Labels["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%v: labels %v lack the release's", d, d.Metadata.Labels)
		}
	}
	find := func(kind, name string) (k8sDoc, bool) {
		for _, d := range byKind[kind] {
			if d.Metadata.Name == name {
				return d, true
			}
		}
		return k8sDoc{}, false
	}

	if len(byKind["Deployment"]) != 1 {
		t.Fatalf("%d Deployments, want 1", len(byKind["Deployment"]))
	}
	var dep k8sDeployment
	byKind["Deployment"][0].decode(t, &dep)
	pod := dep.Spec.Template.Spec
	podLabels := dep.Spec.Template.Metadata.Labels
	if !selects(dep.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", dep.Spec.Selector.MatchLabels, podLabels)
	}
	for _, d := range docs {
		want := ns
		if d.Kind == "Role" || d.Kind == "RoleBinding" {
			want = "" // checked below: the discovery's namespace
		}
		if d.Kind == "ConfigMap" && strings.HasSuffix(d.Metadata.Name, "-dashboard") {
			want = "" // grafanaDashboard.namespace
		}
		if want != "" && d.Metadata.Namespace != want {
			t.Errorf("%v: namespace %q, want the release's %q", d, d.Metadata.Namespace, want)
		}
	}

	c, ports := checkRouterContainer(t, pod, "http", "admin")
	cfg := routerConfig(t, c, pod, func(kind, name string) map[string][]byte {
		d, ok := find(kind, name)
		if !ok {
			if f, ok := existing[name]; ok && kind == "Secret" {
				return f
			}
			t.Fatalf("the pod mounts %s %s: not rendered, nor one the test provides", kind, name)
		}
		var obj struct {
			Data       map[string]string
			StringData map[string]string `yaml:"stringData"`
		}
		d.decode(t, &obj)
		files := map[string][]byte{}
		for k, v := range obj.StringData {
			files[k] = []byte(v)
		}
		for k, v := range obj.Data {
			if kind == "Secret" {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					t.Fatalf("%v: data %s: %v", d, k, err)
				}
				files[k] = b
			} else {
				files[k] = []byte(v)
			}
		}
		return files
	})
	checkRouterConfig(t, cfg, c, pod, ports)
	got.tls = cfg.TLSCertFile != ""
	got.keys = cfg.Keys.File != ""
	got.discovery = cfg.Discovery == "k8s"
	got.cluster = cfg.Cluster.Bind != ""
	got.clusterKey = len(cfg.Cluster.Key) > 0

	// Probes: the admin listener's /health and /ready.
	for name, p := range map[string]*k8sProbe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port != "admin" {
			t.Errorf("%s probe %+v: want an httpGet on port admin", name, p)
		}
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/health" ||
		c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/ready" {
		t.Error("liveness must probe /health and readiness /ready (which answers 503 while draining)")
	}

	// Services select the pods and target container ports; the API's
	// is there; the join seeds are headless and publish unready pods.
	services := map[string]k8sService{}
	serviceLabels := map[string]map[string]string{}
	for _, d := range byKind["Service"] {
		var s k8sService
		d.decode(t, &s)
		services[d.Metadata.Name] = s
		serviceLabels[d.Metadata.Name] = d.Metadata.Labels
		if !selects(s.Spec.Selector, podLabels) {
			t.Errorf("%v: selector %v does not select the router pods", d, s.Spec.Selector)
		}
		for _, p := range s.Spec.Ports {
			if cp, ok := ports[p.TargetPort]; !ok || cp.Protocol != p.Protocol {
				t.Errorf("%v: port %s targets %q (%s), not a container port of that protocol", d, p.Name, p.TargetPort, p.Protocol)
			}
		}
	}
	if !slices.ContainsFunc(slices.Collect(maps.Values(services)), func(s k8sService) bool {
		return s.Spec.ClusterIP != "None" && slices.ContainsFunc(s.Spec.Ports, func(p k8sPort) bool { return p.TargetPort == "http" })
	}) {
		t.Error("no Service exposes the API (targetPort http)")
	}
	if got.cluster && len(cfg.Cluster.Join) == 0 {
		t.Error("cluster-bind without a join seed")
	}
	for _, j := range cfg.Cluster.Join {
		host, port, _ := net.SplitHostPort(j) // validated
		s, ok := services[host]
		if !ok || s.Spec.ClusterIP != "None" || !s.Spec.PublishNotReadyAddresses {
			t.Errorf("join %s: %q is not a headless Service of the release publishing not-ready pods", j, host)
		}
		if port != strconv.Itoa(ports["gossip-tcp"].ContainerPort) {
			t.Errorf("join %s: not the gossip port", j)
		}
	}

	// The ServiceAccount, and with discovery the Role in its namespace.
	if sa := pod.ServiceAccountName; sa != "" && sa != "default" {
		if _, ok := find("ServiceAccount", sa); !ok {
			t.Errorf("the pods' ServiceAccount %s is not rendered", sa)
		}
	}
	roles, bindings := byKind["Role"], byKind["RoleBinding"]
	if !got.discovery {
		if len(roles)+len(bindings)+len(byKind["ClusterRole"])+len(byKind["ClusterRoleBinding"]) > 0 {
			t.Error("RBAC without discovery: the routers read nothing of the API")
		}
	} else {
		if pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken {
			t.Error("discovery without the ServiceAccount's token")
		}
		if len(bindings) != 1 {
			t.Fatalf("%d RoleBindings, want 1", len(bindings))
		}
		var binding struct {
			RoleRef  struct{ Kind, Name string } `yaml:"roleRef"`
			Subjects []struct{ Kind, Name, Namespace string }
		}
		bindings[0].decode(t, &binding)
		role, ok := find(binding.RoleRef.Kind, binding.RoleRef.Name)
		if !ok || binding.RoleRef.Kind != "Role" {
			t.Fatalf("RoleBinding's roleRef %+v: no such Role", binding.RoleRef)
		}
		if role.Metadata.Namespace != cfg.K8s.Namespace || bindings[0].Metadata.Namespace != cfg.K8s.Namespace {
			t.Errorf("Role in %q, RoleBinding in %q; k8s-namespace %q", role.Metadata.Namespace, bindings[0].Metadata.Namespace, cfg.K8s.Namespace)
		}
		if !slices.ContainsFunc(binding.Subjects, func(s struct{ Kind, Name, Namespace string }) bool {
			return s.Kind == "ServiceAccount" && s.Name == pod.ServiceAccountName && s.Namespace == ns
		}) {
			t.Errorf("RoleBinding subjects %+v lack ServiceAccount %s/%s", binding.Subjects, ns, pod.ServiceAccountName)
		}
		var r struct {
			Rules []struct {
				APIGroups []string `yaml:"apiGroups"`
				Resources []string
				Verbs     []string
			}
		}
		role.decode(t, &r)
		if len(r.Rules) != 1 || !slices.Equal(r.Rules[0].APIGroups, []string{"discovery.k8s.io"}) || !slices.Equal(r.Rules[0].Resources, []string{"endpointslices"}) ||
			!slices.Equal(r.Rules[0].Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("Role rules %+v: want get, list and watch on endpointslices.discovery.k8s.io, nothing else", r.Rules)
		}
	}

	// PDB and NetworkPolicy: the router pods, container ports.
	for _, d := range byKind["PodDisruptionBudget"] {
		var pdb struct {
			Spec struct{ Selector k8sSelector }
		}
		d.decode(t, &pdb)
		if !selects(pdb.Spec.Selector.MatchLabels, podLabels) {
			t.Errorf("%v does not select the router pods", d)
		}
	}
	for _, d := range byKind["NetworkPolicy"] {
		var np struct {
			Spec struct {
				PodSelector k8sSelector `yaml:"podSelector"`
				Ingress     []struct{ Ports []k8sPort }
			}
		}
		d.decode(t, &np)
		if !selects(np.Spec.PodSelector.MatchLabels, podLabels) {
			t.Errorf("%v does not select the router pods", d)
		}
		for _, in := range np.Spec.Ingress {
			for _, p := range in.Ports {
				name, _ := p.Port.(string)
				if cp, ok := ports[name]; !ok || cp.Protocol != p.Protocol {
					t.Errorf("%v: port %v/%s is not a container port", d, p.Port, p.Protocol)
				}
			}
		}
	}

	// The ServiceMonitor scrapes /metrics on the admin port of every pod.
	for _, d := range byKind["ServiceMonitor"] {
		got.serviceMonitor = true
		var sm struct {
			Spec struct {
				Selector  k8sSelector
				Endpoints []struct{ Port, Path string }
			}
		}
		d.decode(t, &sm)
		var target []string
		for name, labels := range serviceLabels {
			if selects(sm.Spec.Selector.MatchLabels, labels) {
				target = append(target, name)
			}
		}
		if len(target) != 1 || services[target[0]].Spec.ClusterIP != "None" || !services[target[0]].Spec.PublishNotReadyAddresses {
			t.Errorf("%v selects Services %q, want the headless one", d, target)
			continue
		}
		for _, e := range sm.Spec.Endpoints {
			sp := slices.IndexFunc(services[target[0]].Spec.Ports, func(p k8sPort) bool { return p.Name == e.Port })
			if sp < 0 || services[target[0]].Spec.Ports[sp].TargetPort != "admin" || e.Path != "/metrics" {
				t.Errorf("%v: endpoint %+v: want /metrics on the admin port", d, e)
			}
		}
	}

	// The dashboard: deploy/grafana's, byte for byte.
	for _, d := range byKind["ConfigMap"] {
		var cm struct{ Data map[string]string }
		d.decode(t, &cm)
		text, ok := cm.Data["saltus-dashboard.json"]
		if !ok {
			continue
		}
		got.dashboard = true
		want, err := os.ReadFile("../../deploy/grafana/saltus-dashboard.json")
		if err != nil {
			t.Fatal(err)
		}
		if text != string(want) {
			t.Errorf("%v: saltus-dashboard.json differs from deploy/grafana's", d)
		}
		if d.Metadata.Labels["grafana_dashboard"] != "1" {
			t.Errorf("%v: no grafana_dashboard label for the sidecar", d)
		}
	}
	return got
}

// testCertPEM: a self-signed P-256 certificate for localhost and its key.
func testCertPEM(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "saltus"},
		DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}
