// Command mkimage builds saltus's container image without a container
// engine: it packs a static saltus binary (make release) into an OCI image
// layout directory, and optionally a docker-archive tar (docker load,
// kind load image-archive, podman load):
//
//	go run ./internal/cmd/mkimage --binary dist/saltus-linux-amd64 --arch amd64 \
//	    --version v1.2.3 --layout dist/oci --archive dist/saltus-image.tar
//
// (`make image` does this.) The image is the Dockerfile's, built another
// way: one layer on scratch holding /usr/local/bin/saltus (0755),
// /etc/saltus/saltus.yaml (deploy/saltus.yaml), /etc/passwd and
// /etc/group with the user nonroot (65532, distroless's), /var/lib/saltus
// owned by it (for --state-dir), and this machine's CA bundle
// (/etc/ssl/certs/ca-certificates.crt, where Go's crypto/x509 looks first
// on Linux) so HTTPS upstreams verify; the Dockerfile's ENTRYPOINT, CMD,
// USER and EXPOSE (a test checks they agree). Every file's time is
// --created (SOURCE_DATE_EPOCH if set, else the Unix epoch), so the same
// inputs give the same image digest.
//
// It is a build tool, not part of the router's request path.
//
// # Concurrency
//
// One goroutine, main's (go-containerregistry's writers run their own
// and join them before they return).
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed parts. The Dockerfile says the same (deploy_test in
// cmd/saltus and this package's test check both against these).
const (
	binaryPath = "/usr/local/bin/saltus"
	configPath = "/etc/saltus/saltus.yaml"
	stateDir   = "/var/lib/saltus"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
	// nonroot is distroless's unprivileged user and group id.
	nonroot = 65532
	source  = "https://github.com/saltus-lb/saltus"
)

var (
	entrypoint = []string{binaryPath}
	// cmd is serve with the packed config; the admin listener on every
	// interface, since the container's loopback is unreachable from
	// outside (probes, Prometheus); never modified.
	cmd = []string{"serve", "--config", configPath, "--admin-listen", "0.0.0.0:9180"}
	// ports: the API, the admin listener, the cluster (memberlist, TCP and
	// UDP); never modified.
	ports = []string{"8080/tcp", "9180/tcp", "7946/tcp", "7946/udp"}
)

// options are mkimage's flags.
type options struct {
	binary, arch, version, revision string
	config, caCerts                 string
	layout, archive, tag            string
	created                         time.Time
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 2
	}
	img, err := build(o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	if err := write(o, img); err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	d, err := img.Digest()
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	size, err := img.Size() // the manifest's; the layer's below
	if err == nil {
		var ls []v1.Layer
		if ls, err = img.Layers(); err == nil && len(ls) == 1 {
			var n int64
			n, err = ls[0].Size()
			size += n
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "saltus image %s (linux/%s, %.1f MiB compressed): %s", o.version, o.arch, float64(size)/(1<<20), d)
	if o.layout != "" {
		fmt.Fprintf(stdout, " in %s", o.layout)
	}
	if o.archive != "" {
		fmt.Fprintf(stdout, ", %s tagged %s", o.archive, o.tag)
	}
	fmt.Fprintln(stdout)
	return 0
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.binary, "binary", "", "`path` of the static saltus binary (make release: dist/saltus-linux-ARCH); required")
	fs.StringVar(&o.arch, "arch", "amd64", "the binary's GOARCH: amd64 or arm64 (checked against the ELF header)")
	fs.StringVar(&o.version, "version", "dev", "image `version`: the label org.opencontainers.image.version, the layout's ref name and the archive's default tag")
	fs.StringVar(&o.revision, "revision", "", "source `commit` for the label org.opencontainers.image.revision; empty: no label")
	fs.StringVar(&o.config, "config", "deploy/saltus.yaml", "`file` packed as "+configPath+", the config CMD runs with")
	fs.StringVar(&o.caCerts, "ca-certs", caPath, "CA bundle `file` packed as "+caPath+" (for HTTPS upstreams); empty: none. The default is skipped with a warning when this machine has none")
	fs.StringVar(&o.layout, "layout", "", "OCI image layout `directory` to write (must not exist or be empty)")
	fs.StringVar(&o.archive, "archive", "", "docker-archive tar `file` to write (docker load, kind load image-archive)")
	fs.StringVar(&o.tag, "tag", "", "the archive's image `references`, comma-separated; default saltus:VERSION,saltus:latest")
	created := fs.String("created", "", "image and file `time`, Unix seconds; default $SOURCE_DATE_EPOCH, else 0 (reproducible digests)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.binary == "" {
		return o, errors.New("--binary is required")
	}
	if o.layout == "" && o.archive == "" {
		return o, errors.New("nothing to write: give --layout, --archive or both")
	}
	if o.arch != "amd64" && o.arch != "arm64" {
		return o, fmt.Errorf("--arch: want amd64 or arm64, got %q", o.arch)
	}
	if ents, err := os.ReadDir(o.layout); o.layout != "" && err == nil && len(ents) > 0 {
		return o, fmt.Errorf("--layout %s: not empty (remove it first: the layout would gain a second image)", o.layout)
	}
	if o.tag == "" {
		o.tag = "saltus:" + o.version + ",saltus:latest"
	}
	if *created == "" {
		*created = os.Getenv("SOURCE_DATE_EPOCH")
	}
	if *created != "" {
		sec, err := strconv.ParseInt(*created, 10, 64)
		if err != nil || sec < 0 {
			return o, fmt.Errorf("--created (or SOURCE_DATE_EPOCH): want Unix seconds, got %q", *created)
		}
		o.created = time.Unix(sec, 0).UTC()
	} else {
		o.created = time.Unix(0, 0).UTC()
	}
	return o, nil
}

// build returns the image: scratch plus one layer (rootfs) and the config.
func build(o options, warn io.Writer) (v1.Image, error) {
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return nil, err
	}
	if err := checkStatic(bin, o.arch); err != nil {
		return nil, fmt.Errorf("%s: %w", o.binary, err)
	}
	conf, err := os.ReadFile(o.config)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var ca []byte
	if o.caCerts != "" {
		ca, err = os.ReadFile(o.caCerts)
		if errors.Is(err, fs.ErrNotExist) && o.caCerts == caPath {
			fmt.Fprintf(warn, "mkimage: warning: no %s on this machine: the image has no CA bundle (HTTPS upstreams will not verify); give --ca-certs\n", caPath)
			ca, err = nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("--ca-certs: %w", err)
		}
	}
	fsTar, err := rootfs(o.created, bin, conf, ca)
	if err != nil {
		return nil, err
	}
	layer, err := layerOf(fsTar)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	exposed := map[string]struct{}{}
	for _, p := range ports {
		exposed[p] = struct{}{}
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "saltus",
		"org.opencontainers.image.description": "a KV-cache-aware load balancer for LLM inference",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
	}
	if o.revision != "" {
		labels["org.opencontainers.image.revision"] = o.revision
	}
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: o.arch,
		OS:           "linux",
		Created:      v1.Time{Time: o.created},
		Config: v1.Config{
			Entrypoint:   entrypoint,
			Cmd:          cmd,
			User:         fmt.Sprintf("%d:%d", nonroot, nonroot),
			WorkingDir:   "/",
			Env:          []string{"PATH=/usr/local/bin"},
			ExposedPorts: exposed,
			Labels:       labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: o.created},
			CreatedBy: "saltus internal/cmd/mkimage",
			Comment:   "saltus " + o.version + " on scratch",
		},
	})
}

// layerOf is an OCI gzip layer of an uncompressed tar, compressed once
// (tarball.WithCompressedCaching: the digest and the writers read it).
func layerOf(fsTar []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(fsTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// rootfs is the layer's tar: the directories, then the files, every entry
// owned by root but /var/lib/saltus, at time mtime.
func rootfs(mtime time.Time, bin, conf, ca []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonroot)
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("etc/saltus", 0o755, 0) },
		func() error { return file(configPath[1:], 0o644, conf) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("usr", 0o755, 0) },
		func() error { return dir("usr/local", 0o755, 0) },
		func() error { return dir("usr/local/bin", 0o755, 0) },
		func() error { return file(binaryPath[1:], 0o755, bin) },
		func() error { return dir("var", 0o755, 0) },
		func() error { return dir("var/lib", 0o755, 0) },
		func() error { return dir(stateDir[1:], 0o700, nonroot) },
	}
	if ca != nil {
		steps = append(steps,
			func() error { return dir("etc/ssl", 0o755, 0) },
			func() error { return dir("etc/ssl/certs", 0o755, 0) },
			func() error { return file(caPath[1:], 0o644, ca) },
		)
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, fmt.Errorf("cannot write the layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("cannot write the layer: %w", err)
	}
	return buf.Bytes(), nil
}

// checkStatic refuses a binary that would not start on scratch: not a
// Linux ELF executable of arch, or one that asks for a dynamic loader
// (built with cgo: CGO_ENABLED=0 is what make release sets).
func checkStatic(bin []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != want {
		return fmt.Errorf("built for %v, not %s (--arch)", f.Machine, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (it names a program interpreter): build it with CGO_ENABLED=0, as make release does")
		}
	}
	return nil
}

// write writes the layout and the archive that o asks for.
func write(o options, img v1.Image) error {
	if o.layout != "" {
		p, err := layout.Write(o.layout, empty.Index)
		if err != nil {
			return fmt.Errorf("cannot write the layout %s: %w", o.layout, err)
		}
		err = p.AppendImage(img,
			layout.WithPlatform(v1.Platform{OS: "linux", Architecture: o.arch}),
			layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.version}))
		if err != nil {
			return fmt.Errorf("cannot write the layout %s: %w", o.layout, err)
		}
	}
	if o.archive != "" {
		refs := map[name.Reference]v1.Image{}
		for t := range strings.SplitSeq(o.tag, ",") {
			ref, err := name.NewTag(t)
			if err != nil {
				return fmt.Errorf("--tag: %w", err)
			}
			refs[ref] = img
		}
		if err := tarball.MultiRefWriteToFile(o.archive, refs); err != nil {
			return fmt.Errorf("cannot write the archive %s: %w", o.archive, err)
		}
	}
	return nil
}
