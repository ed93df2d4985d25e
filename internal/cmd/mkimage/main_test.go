package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/saltus-lb/saltus/rules/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestImage builds saltus as make release does (static, CGO_ENABLED=0),
// packs it, reads the layout and the archive back, checks the config
// against the Dockerfile's, and runs the binary taken out of the layer.
func TestImage(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux; its binary runs only here")
	}
	if testing.Short() {
		t.Skip("builds saltus (~30 s)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "saltus")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version=v9.9.9-test -s -w", "-o", bin, "../../../cmd/saltus")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lay, archive := filepath.Join(dir, "oci"), filepath.Join(dir, "saltus.tar")
	var stdout, stderr bytes.Buffer
	args := []string{"--binary", bin, "--arch", runtime.GOARCH, "--version", "v9.9.9-test", "--revision", "abc123",
		"--config", "../../../deploy/saltus.yaml", "--ca-certs", ca, "--created", "1700000000",
		"--layout", lay, "--archive", archive}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("mkimage: exit %d: %s", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "saltus image v9.9.9-test (linux/"+runtime.GOARCH) {
		t.Errorf("mkimage printed %q", stdout.String())
	}

	// The layout: one image, for linux/GOARCH, named by the version.
	p, err := layout.FromPath(lay)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("layout index has %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != runtime.GOARCH {
		t.Errorf("index platform %+v", desc.Platform)
	}
	if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != "v9.9.9-test" {
		t.Errorf("ref.name %q", got)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("manifest media type %q", mt)
	}

	// The config: the Dockerfile's entrypoint, command, user and ports.
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	df := dockerfile(t)
	if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/saltus"}) || !slices.Equal(cf.Config.Entrypoint, df.entrypoint) {
		t.Errorf("entrypoint %q, Dockerfile %q", cf.Config.Entrypoint, df.entrypoint)
	}
	if !slices.Equal(cf.Config.Cmd, df.cmd) || !slices.Equal(cf.Config.Cmd[:3], []string{"serve", "--config", "/etc/saltus/saltus.yaml"}) {
		t.Errorf("cmd %q, Dockerfile %q", cf.Config.Cmd, df.cmd)
	}
	if cf.Config.User != "65532:65532" || cf.Config.User != df.user {
		t.Errorf("user %q, Dockerfile %q", cf.Config.User, df.user)
	}
	var exposed []string
	for p := range cf.Config.ExposedPorts {
		exposed = append(exposed, p)
	}
	slices.Sort(exposed)
	if !slices.Equal(exposed, df.expose) {
		t.Errorf("exposed ports %q, Dockerfile %q", exposed, df.expose)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || cf.Created.Unix() != 1700000000 {
		t.Errorf("os %q arch %q created %v", cf.OS, cf.Architecture, cf.Created)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.version":  "v9.9.9-test",
		"org.opencontainers.image.source":   "https://github.com/saltus-lb/saltus",
		"org.opencontainers.image.revision": "abc123",
	} {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
		}
	}

	// The files, as a container sees them.
	files := extract(t, img)
	for path, mode := range map[string]int64{
		"usr/local/bin/saltus":              0o755,
		"etc/saltus/saltus.yaml":            0o644,
		"etc/ssl/certs/ca-certificates.crt": 0o644,
		"etc/passwd":                        0o644,
		"var/lib/saltus":                    0o700,
	} {
		f, ok := files[path]
		if !ok {
			t.Errorf("image has no %s", path)
			continue
		}
		if f.hdr.Mode != mode {
			t.Errorf("%s: mode %o, want %o", path, f.hdr.Mode, mode)
		}
	}
	if f := files["var/lib/saltus"]; f.hdr != nil && f.hdr.Uid != 65532 {
		t.Errorf("/var/lib/saltus owned by %d, want 65532", f.hdr.Uid)
	}
	if !strings.Contains(string(files["etc/passwd"].data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd: %q", files["etc/passwd"].data)
	}
	if want, _ := os.ReadFile(ca); !bytes.Equal(files["etc/ssl/certs/ca-certificates.crt"].data, want) {
		t.Error("the CA bundle is not --ca-certs' file")
	}
	if want, _ := os.ReadFile("../../../deploy/saltus.yaml"); !bytes.Equal(files["etc/saltus/saltus.yaml"].data, want) {
		t.Error("/etc/saltus/saltus.yaml is not deploy/saltus.yaml")
	}
	packed := filepath.Join(dir, "packed-saltus")
	if err := os.WriteFile(packed, files["usr/local/bin/saltus"].data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(packed, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "saltus v9.9.9-test ") {
		t.Errorf("the packed saltus version: %v: %q", err, out)
	}

	// The archive holds the same image (config digest; its manifest is
	// docker's) under the default tags.
	for _, ref := range []string{"saltus:v9.9.9-test", "saltus:latest"} {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		aimg, err := tarball.ImageFromPath(archive, &tag)
		if err != nil {
			t.Fatalf("archive, %s: %v", ref, err)
		}
		ac, err := aimg.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		if lc, _ := img.ConfigName(); ac != lc {
			t.Errorf("archive %s: config %v, layout config %v", ref, ac, lc)
		}
	}

	// The same inputs give the same digest.
	again := filepath.Join(dir, "oci2")
	args2 := append(slices.Clone(args[:len(args)-4]), "--layout", again)
	if code := run(args2, io.Discard, &stderr); code != 0 {
		t.Fatalf("mkimage again: exit %d: %s", code, stderr.String())
	}
	p2, err := layout.FromPath(again)
	if err != nil {
		t.Fatal(err)
	}
	idx2, err := p2.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im2, err := idx2.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im2.Manifests[0].Digest != desc.Digest {
		t.Errorf("not reproducible: %v then %v", desc.Digest, im2.Manifests[0].Digest)
	}
}

// TestRefused: mkimage refuses what would not run or would be lost.
func TestRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notELF := filepath.Join(dir, "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(filepath.Join(full, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable() // the test binary: an ELF of this machine
	if err != nil {
		t.Fatal(err)
	}
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no binary", []string{"--layout", dir + "/o"}, 2, "--binary is required"},
		{"no output", []string{"--binary", notELF}, 2, "nothing to write"},
		{"bad arch", []string{"--binary", notELF, "--layout", dir + "/o", "--arch", "386"}, 2, "want amd64 or arm64"},
		{"bad created", []string{"--binary", notELF, "--layout", dir + "/o", "--created", "yesterday"}, 2, "want Unix seconds"},
		{"not ELF", []string{"--binary", notELF, "--layout", dir + "/o"}, 1, "not an ELF executable"},
		{"other arch", []string{"--binary", self, "--arch", other, "--layout", dir + "/o"}, 1, "not " + other},
		{"layout not empty", []string{"--binary", notELF, "--layout", full}, 2, "not empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if other == "" && c.name == "other arch" {
				t.Skip("no other arch known for " + runtime.GOARCH)
			}
			code := run(c.args, io.Discard, &stderr)
			if code != c.code || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d %q, want %d and %q", code, stderr.String(), c.code, c.want)
			}
		})
	}
}

// TestCheckStaticDynamic: a binary that needs a dynamic loader is refused
// (the test binary is static or not depending on the toolchain; /bin/sh
// is dynamic on every glibc system).
func TestCheckStaticDynamic(t *testing.T) {
	t.Parallel()
	sh, err := os.ReadFile("/bin/sh")
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no /bin/sh")
	} else if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(sh))
	if err != nil {
		t.Skipf("/bin/sh is not ELF: %v", err)
	}
	dynamic := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	if !dynamic || f.Machine != map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH] {
		t.Skip("/bin/sh is not a dynamic binary of this machine")
	}
	if err := checkStatic(sh, runtime.GOARCH); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("checkStatic(/bin/sh) = %v, want dynamically linked", err)
	}
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

// extract reads the image's filesystem (mutate.Extract flattens the
// layers, as a container runtime does).
func extract(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close() // read to the end below; Close stops its goroutine on a failure
	files := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = entry{h, data}
	}
	return files
}

// dockerfileImage is what the Dockerfile's final stage says.
type dockerfileImage struct {
	entrypoint, cmd, expose []string
	user                    string
}

func dockerfile(t *testing.T) dockerfileImage {
	t.Helper()
	b, err := os.ReadFile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var d dockerfileImage
	jsonArray := func(s string) []string {
		var a []string
		if err := json.Unmarshal([]byte(s), &a); err != nil {
			t.Fatalf("Dockerfile: %q is not a JSON array: %v", s, err)
		}
		return a
	}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "ENTRYPOINT "):
			d.entrypoint = jsonArray(strings.TrimPrefix(line, "ENTRYPOINT "))
		case strings.HasPrefix(line, "CMD "):
			d.cmd = jsonArray(strings.TrimPrefix(line, "CMD "))
		case strings.HasPrefix(line, "USER "):
			d.user = strings.TrimPrefix(line, "USER ")
		case strings.HasPrefix(line, "EXPOSE "):
			for _, p := range strings.Fields(strings.TrimPrefix(line, "EXPOSE ")) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				d.expose = append(d.expose, p)
			}
		}
	}
	slices.Sort(d.expose)
	return d
}
