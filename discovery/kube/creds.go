package kube

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// apiServer is how the watcher reaches the API server: its URL, TLS and
// credentials. Immutable after New.
type apiServer struct {
	url       *url.URL    // scheme, host and path prefix ("https://10.0.0.1:443", "https://rancher/k8s/clusters/c-1")
	tls       *tls.Config // nil: system roots, verification on
	proxy     *url.URL    // the kubeconfig's proxy-url; nil: the environment's (HTTPS_PROXY, NO_PROXY)
	token     string      // a static bearer token
	tokenFile string      // re-read on every request (bound service-account tokens rotate); wins over token
	namespace string      // the namespace the credentials name ("": none)
	source    string      // "in-cluster" or "kubeconfig PATH, context NAME", for errors and logs
	insecure  bool        // insecure-skip-tls-verify, logged as a warning
}

// maxFileBytes bounds a credential file read (token, certificate, key,
// kubeconfig): real ones are a few KiB.
const maxFileBytes = 1 << 20

// readFileBounded reads path, refusing a file over maxFileBytes.
func readFileBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close() // opened for reading: nothing to flush
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%s is over %d bytes", path, maxFileBytes)
	}
	return b, nil
}

// bearer returns the token to send: the token file's current content
// when there is one (the kubelet rotates a bound service-account token
// every hour or so), else the static token, else "".
func (a *apiServer) bearer() (string, error) {
	if a.tokenFile == "" {
		return a.token, nil
	}
	b, err := readFileBounded(a.tokenFile)
	if err != nil {
		return "", fmt.Errorf("cannot read the API token (%s): %w", a.source, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("the API token file %s (%s) is empty", a.tokenFile, a.source)
	}
	return tok, nil
}

// loadCredentials reads the API server and credentials cfg names: its
// kubeconfig, or else the pod's service account.
func loadCredentials(cfg Config) (*apiServer, error) {
	if cfg.Kubeconfig != "" {
		return loadKubeconfig(cfg.Kubeconfig)
	}
	return inCluster(cfg.saDir(), cfg.env)
}

// inCluster reads the credentials a pod is given: the API server's
// address from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the
// service account's token (re-read on every request), CA and namespace
// from dir.
func inCluster(dir string, getenv func(string) string) (*apiServer, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		var missing []string
		if host == "" {
			missing = append(missing, "KUBERNETES_SERVICE_HOST")
		}
		if port == "" {
			missing = append(missing, "KUBERNETES_SERVICE_PORT")
		}
		return nil, fmt.Errorf("discovery/kube: not in a Kubernetes pod (%s not set): run saltus in the cluster, or give --k8s-kubeconfig", strings.Join(missing, " and "))
	}
	a := &apiServer{
		url:       &url.URL{Scheme: "https", Host: net.JoinHostPort(host, port)},
		tokenFile: filepath.Join(dir, "token"),
		source:    "in-cluster",
	}
	if _, err := a.bearer(); err != nil {
		return nil, fmt.Errorf("discovery/kube: %w (is a service account token mounted? automountServiceAccountToken must not be false)", err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	ca, err := readFileBounded(caFile)
	if err != nil {
		return nil, fmt.Errorf("discovery/kube: cannot read the cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("discovery/kube: the cluster CA %s holds no PEM certificate", caFile)
	}
	a.tls = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	nsFile := filepath.Join(dir, "namespace")
	if ns, err := readFileBounded(nsFile); err == nil {
		a.namespace = strings.TrimSpace(string(ns))
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("discovery/kube: cannot read the pod's namespace: %w", err)
	}
	return a, nil
}

// loadKubeconfig reads the kubeconfig file at path; relative file names
// in it are relative to its directory, as kubectl reads them.
func loadKubeconfig(path string) (*apiServer, error) {
	data, err := readFileBounded(path)
	if err != nil {
		return nil, fmt.Errorf("discovery/kube: cannot read the kubeconfig: %w", err)
	}
	a, err := parseKubeconfig(data, path, readFileBounded)
	if err != nil {
		return nil, fmt.Errorf("discovery/kube: kubeconfig %s: %w", path, err)
	}
	return a, nil
}

// kubeconfig is the part of a kubeconfig file (clientcmd's v1 Config)
// saltus reads; other keys (preferences, extensions, ...) are ignored.
type kubeconfig struct {
	CurrentContext string `yaml:"current-context"`
	Clusters       []struct {
		Name    string    `yaml:"name"`
		Cluster kcCluster `yaml:"cluster"`
	} `yaml:"clusters"`
	Contexts []struct {
		Name    string    `yaml:"name"`
		Context kcContext `yaml:"context"`
	} `yaml:"contexts"`
	Users []struct {
		Name string `yaml:"name"`
		User kcUser `yaml:"user"`
	} `yaml:"users"`
}

type kcCluster struct {
	Server                   string `yaml:"server"`
	TLSServerName            string `yaml:"tls-server-name"`
	InsecureSkipTLSVerify    bool   `yaml:"insecure-skip-tls-verify"`
	CertificateAuthority     string `yaml:"certificate-authority"`
	CertificateAuthorityData string `yaml:"certificate-authority-data"`
	ProxyURL                 string `yaml:"proxy-url"`
}

type kcContext struct {
	Cluster   string `yaml:"cluster"`
	User      string `yaml:"user"`
	Namespace string `yaml:"namespace"`
}

type kcUser struct {
	Token                 string    `yaml:"token"`
	TokenFile             string    `yaml:"tokenFile"`
	ClientCertificate     string    `yaml:"client-certificate"`
	ClientCertificateData string    `yaml:"client-certificate-data"`
	ClientKey             string    `yaml:"client-key"`
	ClientKeyData         string    `yaml:"client-key-data"`
	Username              string    `yaml:"username"`
	Password              string    `yaml:"password"`
	Exec                  yaml.Node `yaml:"exec"`
	AuthProvider          yaml.Node `yaml:"auth-provider"`
}

// parseKubeconfig reads a kubeconfig's current context: its cluster's
// server, CA (file or data, or none: the system's roots) and
// insecure-skip-tls-verify, its user's token, token file or client
// certificate and key, its namespace. path is the file's (relative file
// names in it are relative to its directory); readFile reads those files.
// exec and auth-provider plugins, and basic auth, are refused by name.
func parseKubeconfig(data []byte, path string, readFile func(string) ([]byte, error)) (*apiServer, error) {
	var kc kubeconfig
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	if kc.CurrentContext == "" {
		return nil, errors.New("no current-context: choose one with `kubectl config use-context NAME`")
	}
	var ctx *kcContext
	for i := range kc.Contexts {
		if kc.Contexts[i].Name == kc.CurrentContext {
			ctx = &kc.Contexts[i].Context
			break
		}
	}
	if ctx == nil {
		return nil, fmt.Errorf("the current-context %q is not among its contexts", kc.CurrentContext)
	}
	var cl *kcCluster
	for i := range kc.Clusters {
		if kc.Clusters[i].Name == ctx.Cluster {
			cl = &kc.Clusters[i].Cluster
			break
		}
	}
	if cl == nil {
		return nil, fmt.Errorf("context %q: its cluster %q is not among the clusters", kc.CurrentContext, ctx.Cluster)
	}
	a := &apiServer{
		namespace: ctx.Namespace,
		source:    fmt.Sprintf("kubeconfig %s, context %s", path, kc.CurrentContext),
		insecure:  cl.InsecureSkipTLSVerify,
	}
	dir := filepath.Dir(path)
	resolve := func(name string) string {
		if name == "" || filepath.IsAbs(name) {
			return name
		}
		return filepath.Join(dir, name)
	}
	where := fmt.Sprintf("cluster %q", ctx.Cluster)

	u, err := url.Parse(cl.Server)
	switch {
	case cl.Server == "":
		return nil, fmt.Errorf("%s has no server", where)
	case err != nil:
		return nil, fmt.Errorf("%s: server %q: %w", where, cl.Server, err)
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("%s: server %q: want an https:// (or http://, e.g. kubectl proxy) URL", where, cl.Server)
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("%s: server %q: want scheme://host[:port][/path] without user, query or fragment", where, cl.Server)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	a.url = u
	if cl.ProxyURL != "" {
		p, err := url.Parse(cl.ProxyURL)
		if err != nil || p.Host == "" || (p.Scheme != "http" && p.Scheme != "https" && p.Scheme != "socks5") {
			return nil, fmt.Errorf("%s: proxy-url %q: want an http, https or socks5 URL with a host", where, cl.ProxyURL)
		}
		a.proxy = p
	}

	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cl.TLSServerName, InsecureSkipVerify: cl.InsecureSkipTLSVerify}
	var ca []byte
	switch {
	case cl.CertificateAuthorityData != "":
		if ca, err = decodeData(cl.CertificateAuthorityData); err != nil {
			return nil, fmt.Errorf("%s: certificate-authority-data: %w", where, err)
		}
	case cl.CertificateAuthority != "":
		if ca, err = readFile(resolve(cl.CertificateAuthority)); err != nil {
			return nil, fmt.Errorf("%s: certificate-authority: %w", where, err)
		}
	}
	if ca != nil {
		if cl.InsecureSkipTLSVerify {
			return nil, fmt.Errorf("%s: a certificate authority and insecure-skip-tls-verify together: drop one (kubectl refuses this too)", where)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%s: the certificate authority holds no PEM certificate", where)
		}
		tc.RootCAs = pool
	}

	if ctx.User != "" {
		var user *kcUser
		for i := range kc.Users {
			if kc.Users[i].Name == ctx.User {
				user = &kc.Users[i].User
				break
			}
		}
		if user == nil {
			return nil, fmt.Errorf("context %q: its user %q is not among the users", kc.CurrentContext, ctx.User)
		}
		where := fmt.Sprintf("user %q", ctx.User)
		switch {
		case user.Exec.Kind != 0:
			return nil, fmt.Errorf("%s: exec credential plugins (%s) are not supported: use a token (a service account's: `kubectl create token NAME`) or a client certificate", where, execCommand(&user.Exec))
		case user.AuthProvider.Kind != 0:
			return nil, fmt.Errorf("%s: auth-provider plugins are not supported: use a token (a service account's: `kubectl create token NAME`) or a client certificate", where)
		case user.Username != "" || user.Password != "":
			return nil, fmt.Errorf("%s: basic auth (username, password) is not supported (Kubernetes removed it in 1.19): use a token or a client certificate", where)
		}
		a.token = user.Token
		a.tokenFile = resolve(user.TokenFile)
		cert, err := loadPair(user, resolve, readFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
	}
	if u.Scheme == "https" {
		a.tls = tc
	} else if len(tc.Certificates) > 0 || tc.RootCAs != nil {
		return nil, fmt.Errorf("%s: server %q is http://, but a certificate is configured: use https://", where, cl.Server)
	}
	return a, nil
}

// loadPair reads the user's client certificate and key (data wins over
// the file, as in kubectl); nil when it has neither.
func loadPair(user *kcUser, resolve func(string) string, readFile func(string) ([]byte, error)) (*tls.Certificate, error) {
	load := func(data, file, name string) ([]byte, error) {
		if data != "" {
			b, err := decodeData(data)
			if err != nil {
				return nil, fmt.Errorf("%s-data: %w", name, err)
			}
			return b, nil
		}
		if file != "" {
			b, err := readFile(resolve(file))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			return b, nil
		}
		return nil, nil
	}
	certPEM, err := load(user.ClientCertificateData, user.ClientCertificate, "client-certificate")
	if err != nil {
		return nil, err
	}
	keyPEM, err := load(user.ClientKeyData, user.ClientKey, "client-key")
	if err != nil {
		return nil, err
	}
	switch {
	case certPEM == nil && keyPEM == nil:
		return nil, nil
	case certPEM == nil:
		return nil, errors.New("a client-key without a client-certificate")
	case keyPEM == nil:
		return nil, errors.New("a client-certificate without a client-key")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("client certificate and key: %w", err)
	}
	return &cert, nil
}

// decodeData decodes a kubeconfig *-data field: base64 of the PEM.
func decodeData(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	if !bytes.Contains(b, []byte("-----BEGIN ")) {
		return nil, errors.New("the decoded data is not PEM")
	}
	return b, nil
}

// execCommand names an exec plugin's command for the error message.
func execCommand(n *yaml.Node) string {
	var e struct {
		Command string `yaml:"command"`
	}
	if err := n.Decode(&e); err != nil || e.Command == "" {
		return "exec"
	}
	return "exec: " + e.Command
}
