package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.yaml.in/yaml/v3"
)

// The Kubernetes objects the test reads: only the fields it checks.
type (
	k8sMeta struct {
		Name      string
		Namespace string
		Labels    map[string]string
	}
	k8sPort struct {
		Name          string
		ContainerPort int    `yaml:"containerPort"`
		Port          any    // a number, or a port's name (NetworkPolicy)
		TargetPort    string `yaml:"targetPort"`
		Protocol      string
	}
	k8sProbe struct {
		HTTPGet *struct{ Path, Port string } `yaml:"httpGet"`
	}
	k8sSecurity struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		RunAsUser                int   `yaml:"runAsUser"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		Capabilities             struct{ Drop []string }
		SeccompProfile           struct{ Type string } `yaml:"seccompProfile"`
	}
	k8sContainer struct {
		Name string
		Args []string
		Env  []struct {
			Name      string
			ValueFrom struct {
				FieldRef struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		}
		Ports          []k8sPort
		StartupProbe   *k8sProbe `yaml:"startupProbe"`
		LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
		ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
		Lifecycle      struct {
			PreStop struct {
				Sleep *struct{ Seconds int }
			} `yaml:"preStop"`
		}
		Resources       struct{ Requests, Limits map[string]string }
		SecurityContext k8sSecurity `yaml:"securityContext"`
		VolumeMounts    []struct {
			Name      string
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	k8sKeyToPath struct{ Key, Path string }
	k8sVolume    struct {
		Name      string
		ConfigMap *struct {
			Name  string
			Items []k8sKeyToPath
		} `yaml:"configMap"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
			Items      []k8sKeyToPath
		}
		EmptyDir *struct{} `yaml:"emptyDir"`
	}
	k8sSelector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	k8sDeployment struct {
		Spec struct {
			Replicas int
			Selector k8sSelector
			Template struct {
				Metadata k8sMeta
				Spec     k8sPodSpec
			}
		}
	}
	k8sPodSpec struct {
		ServiceAccountName            string      `yaml:"serviceAccountName"`
		AutomountServiceAccountToken  *bool       `yaml:"automountServiceAccountToken"`
		TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
		SecurityContext               k8sSecurity `yaml:"securityContext"`
		Containers                    []k8sContainer
		Volumes                       []k8sVolume
	}
	k8sService struct {
		Spec struct {
			ClusterIP                string `yaml:"clusterIP"`
			PublishNotReadyAddresses bool   `yaml:"publishNotReadyAddresses"`
			Selector                 map[string]string
			Ports                    []k8sPort
		}
	}
)

// k8sDoc is one document of a manifest file.
type k8sDoc struct {
	file       string
	APIVersion string `yaml:"apiVersion"`
	Kind       string
	Metadata   k8sMeta
	node       *yaml.Node
}

func (d k8sDoc) String() string { return d.file + ": " + d.Kind + " " + d.Metadata.Name }

// decode decodes the whole document into v (a k8s… type).
func (d k8sDoc) decode(t *testing.T, v any) {
	t.Helper()
	if err := d.node.Decode(v); err != nil {
		t.Fatalf("%v: %v", d, err)
	}
}

// loadManifests reads every document of the YAML files under dirs (and
// files), each a kubectl-appliable object.
func loadManifests(t *testing.T, paths ...string) []k8sDoc {
	t.Helper()
	var docs []k8sDoc
	for _, root := range paths {
		err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || (!strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml")) {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			dec := yaml.NewDecoder(bytes.NewReader(data))
			for {
				var n yaml.Node
				if err := dec.Decode(&n); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					return err
				}
				d := k8sDoc{file: path, node: &n}
				if err := n.Decode(&d); err != nil {
					return err
				}
				docs = append(docs, d)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return docs
}

// TestKubernetesManifests: every object under deploy/kubernetes (and the
// ServiceMonitors) is well-formed, the objects agree with each other
// (selectors, named ports, RBAC subjects, the ConfigMap the Deployment
// mounts), the ConfigMap's saltus.yaml with the Deployment's args loads
// through the real config loader, and the probes and the scrape path are
// served by a running saltus.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	docs := loadManifests(t, "../../deploy/kubernetes", "../../deploy/prometheus/servicemonitor.yaml")
	byKind := map[string][]k8sDoc{}
	for _, d := range docs {
		if d.APIVersion == "" || d.Kind == "" {
			t.Errorf("%s: a document without apiVersion or kind", d.file)
			continue
		}
		byKind[d.Kind] = append(byKind[d.Kind], d)
		if d.Kind == "Kustomization" {
			continue
		}
		if d.Metadata.Name == "" {
			t.Errorf("%v: no metadata.name", d)
		}
		if d.Kind != "Namespace" && d.Metadata.Namespace != "saltus" {
			t.Errorf("%v: namespace %q, want saltus (the kustomization's)", d, d.Metadata.Namespace)
		}
	}
	one := func(kind, name string) k8sDoc {
		t.Helper()
		for _, d := range byKind[kind] {
			if d.Metadata.Name == name {
				return d
			}
		}
		t.Fatalf("no %s %s in deploy/kubernetes", kind, name)
		return k8sDoc{}
	}

	// The kustomization lists every manifest of its directory (the
	// examples are applied on their own), and those files exist.
	var kust struct {
		Namespace string
		Resources []string
	}
	one("Kustomization", "").decode(t, &kust)
	top, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range top {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			files = append(files, b)
		}
	}
	slices.Sort(files)
	if listed := slices.Sorted(slices.Values(kust.Resources)); !slices.Equal(listed, files) || kust.Namespace != "saltus" {
		t.Errorf("kustomization.yaml: namespace %q, resources %q; want saltus and the directory's files %q", kust.Namespace, listed, files)
	}

	// The Deployment and its one container.
	var dep k8sDeployment
	one("Deployment", "saltus").decode(t, &dep)
	pod := dep.Spec.Template.Spec
	podLabels := dep.Spec.Template.Metadata.Labels
	if dep.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", dep.Spec.Replicas)
	}
	if !selects(dep.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", dep.Spec.Selector.MatchLabels, podLabels)
	}
	c, ports := checkRouterContainer(t, pod, "http", "admin", "gossip-tcp", "gossip-udp")
	cfg := routerConfig(t, c, pod, func(kind, name string) map[string][]byte {
		var cm struct{ Data map[string]string }
		one(kind, name).decode(t, &cm)
		files := map[string][]byte{}
		for k, v := range cm.Data {
			files[k] = []byte(v)
		}
		return files
	})
	discovery := map[string]string{"discovery": cfg.Discovery, "k8s-service": cfg.K8s.Service,
		"k8s-namespace": cfg.K8s.Namespace, "k8s-port-name": cfg.K8s.PortName}
	checkRouterConfig(t, cfg, c, pod, ports)

	// Services: they select the pods and name container ports; the
	// headless one is the join seed and publishes pods before they are ready.
	services := map[string]k8sService{}
	for _, d := range byKind["Service"] {
		var s k8sService
		d.decode(t, &s)
		services[d.Metadata.Name] = s
		if d.file == "../../deploy/kubernetes/examples/vllm.yaml" {
			continue
		}
		if !selects(s.Spec.Selector, podLabels) {
			t.Errorf("%v: selector %v does not select the router pods", d, s.Spec.Selector)
		}
		for _, p := range s.Spec.Ports {
			if cp, ok := ports[p.TargetPort]; !ok || cp.Protocol != p.Protocol {
				t.Errorf("%v: port %s targets %q (%s), not a container port of that protocol", d, p.Name, p.TargetPort, p.Protocol)
			}
		}
	}
	if !slices.ContainsFunc(services["saltus"].Spec.Ports, func(p k8sPort) bool { return p.TargetPort == "http" }) {
		t.Error("Service saltus does not expose the API (targetPort http)")
	}
	if len(cfg.Cluster.Join) == 0 {
		t.Fatal("saltus.yaml joins no peer")
	}
	for _, j := range cfg.Cluster.Join {
		host, port, _ := net.SplitHostPort(j) // validated
		name, _, _ := strings.Cut(host, ".")
		s, ok := services[name]
		if !ok || s.Spec.ClusterIP != "None" || !s.Spec.PublishNotReadyAddresses {
			t.Errorf("join %s: %q is not a headless Service publishing not-ready pods", j, name)
		}
		if port != strconv.Itoa(ports["gossip-tcp"].ContainerPort) {
			t.Errorf("join %s: not the gossip port", j)
		}
	}

	// RBAC: the pods' ServiceAccount may read EndpointSlices.
	one("ServiceAccount", pod.ServiceAccountName)
	var role struct {
		Rules []struct {
			APIGroups []string `yaml:"apiGroups"`
			Resources []string
			Verbs     []string
		}
	}
	var binding struct {
		RoleRef  struct{ Kind, Name string } `yaml:"roleRef"`
		Subjects []struct{ Kind, Name, Namespace string }
	}
	bd := byKind["RoleBinding"]
	if len(bd) != 1 {
		t.Fatalf("%d RoleBindings, want 1", len(bd))
	}
	bd[0].decode(t, &binding)
	roleDoc := one(binding.RoleRef.Kind, binding.RoleRef.Name)
	roleDoc.decode(t, &role)
	if !slices.ContainsFunc(binding.Subjects, func(s struct{ Kind, Name, Namespace string }) bool {
		return s.Kind == "ServiceAccount" && s.Name == pod.ServiceAccountName && s.Namespace == "saltus"
	}) {
		t.Errorf("RoleBinding subjects %+v lack ServiceAccount %s", binding.Subjects, pod.ServiceAccountName)
	}
	granted := false
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, "discovery.k8s.io") && slices.Contains(r.Resources, "endpointslices") &&
			slices.Contains(r.Verbs, "get") && slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") {
			granted = true
		}
	}
	if !granted {
		t.Errorf("Role %s does not grant get, list and watch on endpointslices.discovery.k8s.io", roleDoc.Metadata.Name)
	}
	// The discovery block names the example's Service, a port of it, and
	// the namespace the Role grants in.
	if d := discovery; d["discovery"] != "k8s" {
		t.Errorf("discovery block %v: want discovery: k8s", d)
	} else if vs, ok := services[d["k8s-service"]]; !ok || !slices.ContainsFunc(vs.Spec.Ports, func(p k8sPort) bool { return p.Name == d["k8s-port-name"] }) {
		t.Errorf("discovery block %v: no such Service and port name in the manifests", d)
	} else if d["k8s-namespace"] != roleDoc.Metadata.Namespace {
		t.Errorf("discovery block: k8s-namespace %q, the Role is in %q", d["k8s-namespace"], roleDoc.Metadata.Namespace)
	}

	// The PodDisruptionBudget keeps a quorum of the routers.
	var pdb struct {
		Spec struct {
			MinAvailable   int `yaml:"minAvailable"`
			MaxUnavailable int `yaml:"maxUnavailable"`
			Selector       k8sSelector
		}
	}
	one("PodDisruptionBudget", "saltus").decode(t, &pdb)
	if !selects(pdb.Spec.Selector.MatchLabels, podLabels) || !(pdb.Spec.MaxUnavailable == 1 || pdb.Spec.MinAvailable >= 2 && pdb.Spec.MinAvailable < dep.Spec.Replicas) {
		t.Errorf("PodDisruptionBudget %+v: want the router pods, maxUnavailable 1 or minAvailable 2", pdb.Spec)
	}

	// The NetworkPolicy names container ports.
	var np struct {
		Spec struct {
			PodSelector k8sSelector `yaml:"podSelector"`
			Ingress     []struct{ Ports []k8sPort }
		}
	}
	one("NetworkPolicy", "saltus").decode(t, &np)
	if !selects(np.Spec.PodSelector.MatchLabels, podLabels) {
		t.Error("the NetworkPolicy does not select the router pods")
	}
	for _, in := range np.Spec.Ingress {
		for _, p := range in.Ports {
			name, _ := p.Port.(string) // a number is no container port's name: reported
			if cp, ok := ports[name]; !ok || cp.Protocol != p.Protocol {
				t.Errorf("NetworkPolicy: port %v/%s is not a container port", p.Port, p.Protocol)
			}
		}
	}

	// ServiceMonitors: each selects a Service of the manifests by its
	// labels, on a port that Service has.
	type endpoint struct{ Port, Path string }
	var scrapes []endpoint
	for _, d := range byKind["ServiceMonitor"] {
		var sm struct {
			Spec struct {
				Selector  k8sSelector
				Endpoints []endpoint
			}
		}
		d.decode(t, &sm)
		var target string
		for _, sd := range byKind["Service"] {
			if selects(sm.Spec.Selector.MatchLabels, sd.Metadata.Labels) {
				if target != "" {
					t.Errorf("%v selects both Service %s and %s", d, target, sd.Metadata.Name)
				}
				target = sd.Metadata.Name
			}
		}
		for _, e := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(services[target].Spec.Ports, func(p k8sPort) bool { return p.Name == e.Port }) {
				t.Errorf("%v: Service %q has no port %q", d, target, e.Port)
			}
			if target == "saltus-peers" {
				scrapes = append(scrapes, e)
			}
		}
	}
	if len(scrapes) == 0 {
		t.Error("no ServiceMonitor scrapes the routers")
	}

	// The probes and the scrape: paths a running saltus's admin listener
	// answers 200 on (/ready once a backend is routable), on the admin port.
	paths := map[string]bool{}
	for name, p := range map[string]*k8sProbe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no %s probe (httpGet)", name)
			continue
		}
		if p.HTTPGet.Port != "admin" {
			t.Errorf("%s probe on port %q, want admin", name, p.HTTPGet.Port)
		}
		paths[p.HTTPGet.Path] = true
	}
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/health" ||
		c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/ready" {
		t.Error("liveness must probe /health and readiness /ready (which answers 503 while draining)")
	}
	for _, e := range scrapes {
		if ports[e.Port].ContainerPort != ports["admin"].ContainerPort {
			t.Errorf("the ServiceMonitor scrapes port %s, not admin", e.Port)
		}
		paths[e.Path] = true
	}
	s := startServeWith(t, []*upstream{newUpstream(t, "a")}, nil)
	// /ready answers 200 once the backend's first probe is in.
	waitFor(t, func() bool { return s.adm(t, "GET", "/ready", "").status == 200 })
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		a := s.adm(t, "GET", p, "")
		if a.status != 200 {
			t.Errorf("GET %s on the admin listener: %d %s", p, a.status, a.body)
		}
		if p == "/metrics" && !strings.Contains(a.body, "saltus_requests_total") {
			t.Errorf("GET %s on the admin listener: no saltus metrics", p)
		}
	}
}

// The pod the checks stand for: its name and IP, as the downward API
// gives them.
const (
	testPodName = "saltus-7d9f-abcde"
	testPodIP   = "10.1.2.3"
)

// checkRouterContainer checks the router pod's one container: the ports
// named (the gossip ports one number, TCP and UDP, when it has them), the
// hardening, the resources. It returns the container and its ports by name.
func checkRouterContainer(t *testing.T, pod k8sPodSpec, portNames ...string) (k8sContainer, map[string]k8sPort) {
	t.Helper()
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	ports := map[string]k8sPort{}
	for _, p := range c.Ports {
		ports[p.Name] = p
	}
	for _, name := range portNames {
		if _, ok := ports[name]; !ok {
			t.Errorf("container port %q missing", name)
		}
	}
	if _, ok := ports["gossip-tcp"]; ok && (ports["gossip-udp"].Protocol != "UDP" || ports["gossip-tcp"].ContainerPort != ports["gossip-udp"].ContainerPort) {
		t.Errorf("gossip ports %+v %+v: want one port number, TCP and UDP", ports["gossip-tcp"], ports["gossip-udp"])
	}

	// Hardening, on the pod or the container.
	sc, psc := c.SecurityContext, pod.SecurityContext
	isTrue := func(b *bool) bool { return b != nil && *b }
	if !isTrue(sc.RunAsNonRoot) && !isTrue(psc.RunAsNonRoot) {
		t.Error("runAsNonRoot is not set")
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem is not set")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("capabilities drop %q, want [ALL]", sc.Capabilities.Drop)
	}
	if sc.SeccompProfile.Type != "RuntimeDefault" && psc.SeccompProfile.Type != "RuntimeDefault" {
		t.Error("no RuntimeDefault seccomp profile")
	}
	if psc.RunAsUser != 65532 {
		t.Errorf("runAsUser %d, want the image's 65532", psc.RunAsUser)
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	return c, ports
}

// routerConfig checks the container's args (saltus serve, every flag one
// it has, every $(VAR) an env var from the downward API) and loads
// saltus's configuration as the pod would: the files of its ConfigMap and
// Secret volumes (files(kind, name) gives an object's data) are written
// under a temporary directory standing for the pod's file system, and the
// paths under a mount, in the args and in the --config file, are moved
// there; the config loader reads and validates what they name (the TLS
// pair, the API keys, the cluster key).
func routerConfig(t *testing.T, c k8sContainer, pod k8sPodSpec, files func(kind, name string) map[string][]byte) serveConfig {
	t.Helper()
	flags := newServeFlags(io.Discard, nil).fs
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("container args %q, want serve ...", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.ValueFrom.FieldRef.FieldPath
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_IP"] != "status.podIP" {
		t.Errorf("env %v: want POD_NAME and POD_IP from the downward API", env)
	}
	podValues := map[string]string{"metadata.name": testPodName, "status.podIP": testPodIP}

	// The mounts, under root.
	root := t.TempDir()
	volumes := map[string]k8sVolume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	var mountPaths []string
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			t.Errorf("volume mount %s: no volume %q", m.MountPath, m.Name)
			continue
		}
		mountPaths = append(mountPaths, m.MountPath)
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var data map[string][]byte
		var items []k8sKeyToPath
		switch {
		case v.ConfigMap != nil:
			data, items = files("ConfigMap", v.ConfigMap.Name), v.ConfigMap.Items
		case v.Secret != nil:
			data, items = files("Secret", v.Secret.SecretName), v.Secret.Items
		default:
			continue
		}
		if items == nil {
			for k := range data {
				items = append(items, k8sKeyToPath{k, k})
			}
		}
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				t.Errorf("volume %s: no key %q in its object", m.Name, it.Key)
			}
			if err := os.WriteFile(filepath.Join(dir, it.Path), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Longest first: a mount inside another is matched whole.
	slices.SortFunc(mountPaths, func(a, b string) int { return len(b) - len(a) })
	for i, p := range mountPaths {
		mountPaths[i] = regexp.QuoteMeta(p)
	}
	underRoot := func(s string) string {
		if len(mountPaths) == 0 {
			return s
		}
		re := regexp.MustCompile(`(?:` + strings.Join(mountPaths, "|") + `)(?:/[^\s"',\]]*)?`)
		return re.ReplaceAllStringFunc(s, func(p string) string { return filepath.Join(root, p) })
	}

	var args []string
	for i := 1; i < len(c.Args); i++ {
		a := c.Args[i]
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if flags.Lookup(name) == nil && name != "config" {
				t.Errorf("container args: saltus serve has no flag --%s", name)
			}
		}
		a = regexp.MustCompile(`\$\(([A-Z_]+)\)`).ReplaceAllStringFunc(a, func(ref string) string {
			v, ok := podValues[env[ref[2:len(ref)-1]]]
			if !ok {
				t.Errorf("container args: %s is no env var from the downward API", ref)
			}
			return v
		})
		if i > 1 && c.Args[i-1] == "--config" {
			// The file as the pod sees it, its paths under root.
			text, err := os.ReadFile(filepath.Join(root, a))
			if err != nil {
				t.Fatalf("--config %s: not in a ConfigMap volume: %v", a, err)
			}
			if err := os.WriteFile(filepath.Join(root, a), []byte(underRoot(string(text))), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		args = append(args, underRoot(a))
	}
	cfg, _, err := loadServeConfig(args, io.Discard)
	if err != nil {
		t.Fatalf("the ConfigMap's saltus.yaml with the Deployment's args does not load: %v", err)
	}
	return cfg
}

// checkRouterConfig: the config and the pod agree: ports, addresses, node
// name, state dir, no admin token, drain within the grace period.
func checkRouterConfig(t *testing.T, cfg serveConfig, c k8sContainer, pod k8sPodSpec, ports map[string]k8sPort) {
	t.Helper()
	portOf := func(key, addr string) int {
		t.Helper()
		host, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%s %q: %v", key, addr, err)
		}
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			t.Errorf("%s %q: loopback, unreachable from the kubelet and the Services", key, addr)
		}
		n, _ := strconv.Atoi(p) // validated by loadServeConfig
		return n
	}
	if p := portOf("listen", cfg.Reactor.Listen); p != ports["http"].ContainerPort {
		t.Errorf("listen port %d, container port http %d", p, ports["http"].ContainerPort)
	}
	if p := portOf("admin-listen", cfg.Admin.Listen); p != ports["admin"].ContainerPort {
		t.Errorf("admin-listen port %d, container port admin %d", p, ports["admin"].ContainerPort)
	}
	if _, gossip := ports["gossip-tcp"]; gossip || cfg.Cluster.Bind != "" {
		if p := portOf("cluster-bind", cfg.Cluster.Bind); p != ports["gossip-tcp"].ContainerPort {
			t.Errorf("cluster-bind port %d, container port gossip-tcp %d", p, ports["gossip-tcp"].ContainerPort)
		}
		if want := net.JoinHostPort(testPodIP, strconv.Itoa(ports["gossip-tcp"].ContainerPort)); cfg.Cluster.Advertise != want {
			t.Errorf("cluster-advertise %q, want the pod IP and the gossip port %q", cfg.Cluster.Advertise, want)
		}
		if cfg.Cluster.NodeName != testPodName {
			t.Errorf("node-name %q, want the pod's name", cfg.Cluster.NodeName)
		}
	}
	if cfg.Admin.BearerToken != "" {
		t.Error("admin-token is set: the probes on /ready cannot send it")
	}
	stateVol := ""
	for _, m := range c.VolumeMounts {
		if strings.HasSuffix(cfg.State.Dir, m.MountPath) { // under the test's root
			stateVol = m.Name
		}
	}
	if !slices.ContainsFunc(pod.Volumes, func(v k8sVolume) bool { return v.Name == stateVol && v.EmptyDir != nil }) {
		t.Errorf("state-dir %q is not an emptyDir mount", cfg.State.Dir)
	}
	if c.Lifecycle.PreStop.Sleep == nil {
		t.Fatal("no preStop sleep: the listener would close before the endpoints drop the pod")
	}
	if grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second; grace < time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second+cfg.DrainTimeout {
		t.Errorf("terminationGracePeriodSeconds %v < preStop sleep %ds + drain-timeout %v", grace, c.Lifecycle.PreStop.Sleep.Seconds, cfg.DrainTimeout)
	}
}

// selects reports whether a label selector picks objects labelled labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false // selects everything: never what a manifest here means
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestMonitoringMetricNames: every metric the Grafana dashboard and the
// Prometheus rules query exists: saltus_* in the README's metric table
// (which TestREADMEMetricTable checks against a running saltus), go_* and
// process_* as the metrics library writes them on /metrics, vllm:* as the
// simulator (which mirrors vLLM's names) exposes them, and Prometheus's up.
func TestMonitoringMetricNames(t *testing.T) {
	t.Parallel()
	known := knownMetricNames(t)
	var dash struct {
		SchemaVersion int `json:"schemaVersion"`
		Templating    struct {
			List []struct {
				Name, Type string
				Query      any
			}
		}
		Panels []struct {
			ID         int
			Type       string
			Title      string
			Datasource struct{ UID string }
			Targets    []struct{ Expr string }
		}
	}
	data, err := os.ReadFile("../../deploy/grafana/saltus-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("saltus-dashboard.json: %v", err)
	}
	if dash.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want a current one (39)", dash.SchemaVersion)
	}
	exprs := map[string]string{} // expr → where
	hasDS := false
	for _, v := range dash.Templating.List {
		if v.Type == "datasource" && v.Query == "prometheus" && v.Name == "datasource" {
			hasDS = true
		}
		if q, ok := v.Query.(map[string]any); ok {
			s, _ := q["query"].(string) // a missing query is the empty string: no names
			exprs[s] = "variable " + v.Name
		}
	}
	if !hasDS {
		t.Error("the dashboard has no datasource variable of type prometheus")
	}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d repeats", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %q, want ${datasource}", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs[tg.Expr] = "panel " + p.Title
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	data, err = os.ReadFile("../../deploy/prometheus/saltus-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[r.Expr] = "saltus-rules.yml " + r.Alert
		}
	}
	// The plain Prometheus config loads the rules file beside it.
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName string `yaml:"job_name"`
		} `yaml:"scrape_configs"`
	}
	data, err = os.ReadFile("../../deploy/prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &prom); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	if !slices.Equal(prom.RuleFiles, []string{"saltus-rules.yml"}) || len(prom.ScrapeConfigs) < 2 {
		t.Errorf("prometheus.yml: rule_files %q, %d scrape configs; want saltus-rules.yml and the routers' and engines' jobs", prom.RuleFiles, len(prom.ScrapeConfigs))
	}
	if len(exprs) < 40 {
		t.Fatalf("only %d queries read: the dashboard or the rules were not parsed", len(exprs))
	}
	used := map[string]bool{}
	for expr, where := range exprs {
		names := promqlMetricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric name in %q", where, expr)
		}
		for _, n := range unknownMetrics(names, known) {
			t.Errorf("%s: metric %s is not on /metrics (README's metric table), in %q", where, n, expr)
		}
		for _, n := range names {
			used[n] = true
		}
	}
	// Coverage the dashboard promises: hit ratio, prediction, latency,
	// load, route table, tokenizer, cluster, requests.
	for _, n := range []string{"vllm:prefix_cache_hits_total", "saltus_route_actual_cached_tokens_total", "saltus_backend_ttfb_seconds_bucket",
		"saltus_backend_in_flight", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "saltus_tree_evictions_total",
		"saltus_tokenizer_cache_hits_total", "saltus_gossip_members", "saltus_gossip_messages_sent_total", "saltus_requests_total"} {
		if !used[n] {
			t.Errorf("no panel or rule uses %s", n)
		}
	}
	// The check can fail: a name that does not exist is reported.
	if got := unknownMetrics(promqlMetricNames(`sum(rate(saltus_bogus_total{code="5xx"}[5m])) / sum(rate(saltus_requests_total[5m]))`), known); !slices.Equal(got, []string{"saltus_bogus_total"}) {
		t.Errorf("a bogus metric: unknownMetrics = %q, want [saltus_bogus_total]", got)
	}
}

// knownMetricNames are the names a query may use (see
// TestMonitoringMetricNames).
func knownMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	known, _ := readmeMetricNames(string(readme))
	if len(known) < 50 {
		t.Fatalf("README.md's metric table: %d names", len(known))
	}
	var buf bytes.Buffer
	metrics.WriteProcessMetrics(&buf) // what admin's /metrics appends
	for line := range strings.Lines(buf.String()) {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(line, "#") {
			name, _, _ := strings.Cut(f[0], "{")
			known[name] = true
		}
	}
	sim, err := filepath.Glob("../../bench/vllmsim/*.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`"(vllm:[a-z_:]+)`)
	for _, f := range sim {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			known[string(m[1])] = true
		}
	}
	known["up"] = true // Prometheus's own, per target
	return known
}

// unknownMetrics returns the names (sorted) that are not known, a
// histogram's or summary's _bucket, _sum and _count series counting as
// their family's name.
func unknownMetrics(names []string, known map[string]bool) []string {
	var out []string
	for _, n := range names {
		if known[n] {
			continue
		}
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suf); ok {
				base = b
			}
		}
		if base == n || !known[base] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// promqlKeywords are the PromQL words that are not metric names:
// aggregation operators (which may precede "by (...)" rather than "("),
// binary and set operators, modifiers, and literals.
var promqlKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

// promqlMetricNames returns the metric names a PromQL expression (or a
// Grafana label_values(metric, label) query) selects: the identifiers
// left after dropping string literals, label matchers {…}, ranges […],
// the label lists of by/without/on/ignoring/group_*(…), function names
// (an identifier followed by "("), keywords and numbers. A name inside a
// string (label_replace's arguments) is not seen: no query here has one.
func promqlMetricNames(expr string) []string {
	// Strings and the bracketed parts, which hold label names and values,
	// durations and Grafana's $variables, never metric names.
	var b strings.Builder
	for i := 0; i < len(expr); i++ {
		switch ch := expr[i]; ch {
		case '"', '\'', '`':
			j := i + 1
			for j < len(expr) && expr[j] != ch {
				if expr[j] == '\\' && ch != '`' {
					j++
				}
				j++
			}
			i = j
			b.WriteByte(' ')
		case '{', '[':
			end := map[byte]byte{'{': '}', '[': ']'}[ch]
			for i < len(expr) && expr[i] != end {
				i++
			}
			b.WriteByte(' ')
		default:
			b.WriteByte(ch)
		}
	}
	s := b.String()
	s = promqlLabelValues.ReplaceAllString(s, "$1")
	s = promqlGrouping.ReplaceAllString(s, " ")
	var names []string
	for _, l := range promqlIdent.FindAllStringIndex(s, -1) {
		w := s[l[0]:l[1]]
		if l[0] > 0 && (s[l[0]-1] == '$' || s[l[0]-1] == '.' || s[l[0]-1] >= '0' && s[l[0]-1] <= '9') {
			continue // a Grafana variable, or a number's exponent
		}
		if strings.HasPrefix(strings.TrimLeft(s[l[1]:], " \t\n"), "(") || promqlKeywords[w] {
			continue // a function or an operator
		}
		names = append(names, w)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

var (
	promqlIdent = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// label_values(metric, label), Grafana's variable query: the metric.
	promqlLabelValues = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,[^)]*\)`)
	// The label lists of by, without, on, ignoring, group_left, group_right.
	promqlGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
)

func TestPromqlMetricNames(t *testing.T) {
	t.Parallel()
	f := func(expr string, want ...string) {
		t.Helper()
		if got := promqlMetricNames(expr); !slices.Equal(got, want) {
			t.Errorf("promqlMetricNames(%q) = %q, want %q", expr, got, want)
		}
	}
	f(`up`, "up")
	f(`sum by (code) (rate(saltus_requests_total{instance=~"$instance",code=~"5.."}[$__rate_interval]))`, "saltus_requests_total")
	f(`histogram_quantile(0.99, sum by (le, backend) (rate(saltus_backend_ttfb_seconds_bucket[5m])))`, "saltus_backend_ttfb_seconds_bucket")
	f(`sum(rate(vllm:prefix_cache_hits_total[5m])) / sum(rate(vllm:prefix_cache_queries_total[5m]))`, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
	f(`a > 0 and on (instance) b == 0 unless c offset 5m`, "a", "b", "c")
	f(`x * on(i) group_left(j) y > bool 1e3`, "x", "y")
	f(`max(saltus_gossip_members) != min(saltus_gossip_members)`, "saltus_gossip_members")
	f(`label_values(saltus_backend_in_flight, backend)`, "saltus_backend_in_flight")
	f(`topk(3, sum without (le) (m_sum))`, "m_sum")
	f(`rate(m{s="}"}[1m])`, "m")
	f(`vector(1)`)
}
