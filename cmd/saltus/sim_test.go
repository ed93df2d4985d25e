package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
)

// lockedBuffer is a bytes.Buffer written by simWith's goroutine and read
// by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestSimFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--help"}, 0, "h100-8b   step 8ms + 40µs per prefill token"},
		{[]string{"--profile", "tpu"}, 2, `profile: unknown "tpu", want one of a100-13b, h100-8b`},
		{[]string{"--speedup", "0", "--kv-tokens", "8"}, 2, "saltus sim: vllmsim: kv-tokens: must be between one block (16)"},
		{[]string{"--speedup", "0.5"}, 2, "saltus sim: vllmsim: speedup: must be at least 1"},
		{[]string{"--block-size", "32"}, 2, "block-size: must be 16 without a tokenizer"},
		{[]string{"--max-body", "12XB"}, 2, "unknown size unit"},
		{[]string{"--overload-status", "500"}, 2, "saltus sim: vllmsim: overload-status: must be 429 or 503, got 500"},
		{[]string{"--scheduling-policy", "lifo"}, 2, `saltus sim: vllmsim: scheduling-policy: must be fcfs or priority, got "lifo"`},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--listen", "127.0.0.1:-5"}, 1, "cannot listen on 127.0.0.1:-5"},
	} {
		var out, errb bytes.Buffer
		if code := simWith(tc.args, &out, &errb, nil); code != tc.code || !strings.Contains(errb.String(), tc.err) {
			t.Errorf("saltus sim %q: code %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.err)
		}
	}
}

// TestSimSaturatedFlags: the flags that make a saturated engine, as
// `saltus sim --help` gives them, reach the engine's config, in `saltus
// sim` and, shared through addSimFlags, in `saltus bench`.
func TestSimSaturatedFlags(t *testing.T) {
	t.Parallel()
	args := []string{"--max-num-seqs", "2", "--max-waiting", "2", "--overload-status", "503", "--scheduling-policy", "priority"}
	check := func(cmd string, cfg vllmsim.Config) {
		t.Helper()
		if cfg.MaxNumSeqs != 2 || cfg.MaxWaiting != 2 || cfg.OverloadStatus != 503 || cfg.SchedulingPolicy != vllmsim.PolicyPriority {
			t.Errorf("%s %q: max-num-seqs %d, max-waiting %d, overload-status %d, scheduling-policy %q",
				cmd, args, cfg.MaxNumSeqs, cfg.MaxWaiting, cfg.OverloadStatus, cfg.SchedulingPolicy)
		}
	}
	o, code := parseSim(args, io.Discard)
	if code >= 0 {
		t.Fatalf("saltus sim %q: exit %d", args, code)
	}
	check("saltus sim", o.cfg)
	if d := vllmsim.DefaultConfig(); d.OverloadStatus != 429 || d.SchedulingPolicy != vllmsim.PolicyFCFS {
		t.Errorf("defaults: overload-status %d, scheduling-policy %q; want 429 and fcfs", d.OverloadStatus, d.SchedulingPolicy)
	}

	var b benchOptions
	if code := parseBench("saltus bench", append(args, "--backends", "1"), io.Discard, &b); code >= 0 {
		t.Fatalf("saltus bench %q: exit %d", args, code)
	}
	if _, _, err := b.runConfig(nil, io.Discard, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	check("saltus bench", b.sim)
}

// TestApplySimProfile: the profile's values, then the flags given.
func TestApplySimProfile(t *testing.T) {
	t.Parallel()
	cfg := vllmsim.DefaultConfig()
	sf := simFlags{profile: "h100-8b", kvTokens: 8192, stepBase: time.Millisecond, maxBody: 1 << 20}
	if err := applySimProfile(&cfg, &sf); err != nil {
		t.Fatal(err)
	}
	h := vllmsim.Profiles["h100-8b"]
	if cfg.KVTokens != 8192 || cfg.StepBase != time.Millisecond || cfg.PrefillPerToken != h.PrefillPerToken ||
		cfg.MaxNumSeqs != h.MaxNumSeqs || cfg.MaxBody != 1<<20 || cfg.Name != "h100-8b" {
		t.Errorf("config %+v", cfg)
	}
}

// TestSimServes: saltus sim answers until a signal, then stops cleanly.
func TestSimServes(t *testing.T) {
	t.Parallel()
	var out, errb lockedBuffer
	signals := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() { // the command under test
		done <- simWith([]string{"--listen", "127.0.0.1:0", "--speedup", "100", "--model", "tiny", "--profile", "h100-8b", "--max-tokens", "3"}, &out, &errb, signals)
	}()
	var url string
	deadline := time.Now().Add(10 * time.Second)
	for url == "" {
		if _, u, ok := strings.Cut(out.String(), " on "); ok && strings.HasSuffix(u, "\n") {
			url = strings.TrimSpace(u)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address printed; stdout %q, stderr %q", out.String(), errb.String())
		}
		time.Sleep(time.Millisecond)
	}
	if !strings.HasPrefix(out.String(), "simulated engine tiny (h100-8b, speedup 100) on http://127.0.0.1:") {
		t.Errorf("stdout %q", out.String())
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"completion_tokens":3`) || !strings.Contains(string(b), `"model":"tiny"`) {
		t.Errorf("completion: %d %s", resp.StatusCode, b)
	}
	signals <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Errorf("exit code %d; stderr %q", code, errb.String())
	}
	if !strings.Contains(errb.String(), "stopping") || !strings.Contains(errb.String(), "component=vllmsim") {
		t.Errorf("stderr %q", errb.String())
	}
}

// TestSimModelFlags: --model repeated or listed (the first is the
// primary), --lora-modules as vLLM's CLI takes it (name=path items after
// the flag or in one value, or JSON), --max-loras, --runtime-lora; and
// their errors, by Config.Validate's field names.
func TestSimModelFlags(t *testing.T) {
	t.Parallel()
	lora := func(name, path, base string) vllmsim.LoRA { return vllmsim.LoRA{Name: name, Path: path, Base: base} }
	for _, tc := range []struct {
		args    []string
		model   string
		extra   []string
		loras   []vllmsim.LoRA
		maxLoRA int
		runtime bool
		err     string // a stderr line of exit code 2; "" = parses
	}{
		{args: []string{"--model", "a", "--model", "b", "--lora-modules", "x=/p", "y=/q"},
			model: "a", extra: []string{"b"}, loras: []vllmsim.LoRA{lora("x", "/p", ""), lora("y", "/q", "")}, maxLoRA: 64, runtime: true},
		{args: nil, model: "sim-llama", maxLoRA: 64, runtime: true},
		{args: []string{"--model", "tiny"}, model: "tiny", maxLoRA: 64, runtime: true},
		{args: []string{"--model", "a", "b", "c", "--speedup", "2"}, model: "a", extra: []string{"b", "c"}, maxLoRA: 64, runtime: true},
		{args: []string{"--model=a b", "--lora-modules=x=/p y=/q=r"}, model: "a", extra: []string{"b"},
			loras: []vllmsim.LoRA{lora("x", "/p", ""), lora("y", "/q=r", "")}, maxLoRA: 64, runtime: true},
		{args: []string{"-model", "a", "--model", "b", "--lora-modules", `{"name":"sql","path":"/loras/my sql","base_model_name":"b"}`, "z=/r",
			"--lora-modules", `{"name":"t","path":"/t"}`, "--max-loras", "3", "--runtime-lora=false"},
			model: "a", extra: []string{"b"}, loras: []vllmsim.LoRA{lora("sql", "/loras/my sql", "b"), lora("z", "/r", ""), lora("t", "/t", "")}, maxLoRA: 3},
		{args: []string{"--lora-modules", "x"}, err: `invalid value "x" for flag -lora-modules: LoRA module "x": want name=path or JSON`},
		{args: []string{"--lora-modules", "=/p"}, err: `want name=path or JSON`},
		{args: []string{"--lora-modules", `{"name":"x"}`}, err: `name and path are required`},
		{args: []string{"--lora-modules", `{"name":"x","path":"/p","rank":8}`}, err: `unknown field "rank"`},
		{args: []string{"--lora-modules", `{"name":"x","path":"/p"} {}`}, err: `more after the object`},
		{args: []string{"--model", ""}, err: `empty model name`},
		{args: []string{"--model", "a", "--lora-modules", "a=/p"}, err: `saltus sim: vllmsim: lora-modules: "a" is served already`},
		{args: []string{"--model", "a", "a"}, err: `saltus sim: vllmsim: model: "a" is served already`},
		{args: []string{"--lora-modules", `{"name":"x","path":"/p","base_model_name":"nope"}`}, err: `adapter "x": base model "nope" is not served`},
		{args: []string{"--max-loras", "1", "--lora-modules", "x=/p y=/q"}, err: "lora-modules: 2 adapters, more than max-loras (1)"},
		{args: []string{"--lora-modules", "x=/p", "--listen", "127.0.0.1:0", "stray"}, err: `unexpected argument "stray"`},
	} {
		var errb bytes.Buffer
		o, code := parseSim(tc.args, &errb)
		if tc.err != "" {
			if code != 2 || !strings.Contains(errb.String(), tc.err) {
				t.Errorf("%q: code %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.err)
			}
			continue
		}
		c := o.cfg
		if code != -1 || c.Model != tc.model || !slices.Equal(c.ExtraModels, tc.extra) || !slices.Equal(c.LoRAModules, tc.loras) ||
			c.MaxLoRAs != tc.maxLoRA || c.RuntimeLoRA != tc.runtime {
			t.Errorf("%q: code %d (stderr %q): model %q extra %q loras %+v max %d runtime %v; want %q %q %+v %d %v", tc.args, code, errb.String(),
				c.Model, c.ExtraModels, c.LoRAModules, c.MaxLoRAs, c.RuntimeLoRA, tc.model, tc.extra, tc.loras, tc.maxLoRA, tc.runtime)
		}
	}
}

// TestSpreadFlagValues: the words after a multi-value flag's value
// become more of that flag, up to the next flag or "--".
func TestSpreadFlagValues(t *testing.T) {
	t.Parallel()
	f := func(in, want string) {
		t.Helper()
		if got := strings.Join(spreadFlagValues(strings.Fields(in), "model", "lora-modules"), " "); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	f("--model a b --lora-modules x=/p y=/q", "--model a --model b --lora-modules x=/p --lora-modules y=/q")
	f("--model=a b --listen h:1 c", "--model=a --model b --listen h:1 c")
	f("--lora-modules -odd x=/p", "--lora-modules -odd --lora-modules x=/p")
	f("--speedup 2 --model a -- b c", "--speedup 2 --model a -- b c")
	f("x --model", "x --model")
}

// FuzzParseLoRAModules: a --lora-modules value parses or is an error,
// never a panic; name=path items come back as the value's words.
func FuzzParseLoRAModules(f *testing.F) {
	for _, seed := range []string{"x=/p", "x=/p y=/q=r", `{"name":"x","path":"/p","base_model_name":"b"}`, `{"name":"x"}`, "=", "x=", " ", `{`, `{"name":"x","path":"/p"}x`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ls, err := parseLoRAModules(v)
		if err != nil {
			return
		}
		if len(ls) == 0 {
			t.Fatalf("%q: no module and no error", v)
		}
		if strings.HasPrefix(strings.TrimSpace(v), "{") {
			return
		}
		words := strings.Fields(v)
		for i, l := range ls {
			if l.Name == "" || l.Path == "" || l.Base != "" || words[i] != l.Name+"="+l.Path {
				t.Fatalf("%q: module %d %+v", v, i, l)
			}
		}
	})
}
