package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	chatpkg "github.com/saltus-lb/saltus/tokenpool/chat"
)

// simFlags holds the simulated engine's flags that override its profile
// (0: the profile's value), applied by applySimProfile after parsing so
// that a flag given wins over the profile whatever the order.
type simFlags struct {
	profile                                string
	kvTokens, maxNumSeqs, maxBatched       int
	maxModelLen                            int
	prefillPerToken, stepBase, decodePerSq time.Duration
	maxBody                                byteSize
}

// addSimFlags registers the simulated engine's flags on fs over cfg
// (`saltus sim` and `saltus bench` share them).
func addSimFlags(fs *flag.FlagSet, cfg *vllmsim.Config, sf *simFlags) {
	sf.maxBody = byteSize(cfg.MaxBody)
	fs.StringVar(&sf.profile, "profile", vllmsim.DefaultProfile, "engine `profile`: "+strings.Join(vllmsim.ProfileNames(), ", ")+" (saltus sim --help lists their values; bench/vllmsim/doc.go gives their sources)")
	fs.Var(&modelsFlag{cfg: cfg}, "model", "served model `name`: the first (primary) serves requests without a model; repeat the flag (saltus sim: or list several after it) to serve more base models (vLLM's --served-model-name a b); a request naming a model not served gets 404")
	fs.Var(&loraFlag{cfg: cfg}, "lora-modules", "LoRA adapters to serve from the start, as vLLM's --lora-modules: `adapters`, name=path items, space-separated in one value (saltus sim: or several after the flag), or vLLM's JSON {\"name\":…,\"path\":…,\"base_model_name\":…} (base default: the primary --model); repeatable")
	fs.IntVar(&cfg.MaxLoRAs, "max-loras", cfg.MaxLoRAs, "LoRA adapters loaded at most, `count`, from --lora-modules and run-time loads together; a load over it gets 400")
	fs.BoolVar(&cfg.RuntimeLoRA, "runtime-lora", cfg.RuntimeLoRA, "serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter, as vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (false: both 404; --runtime-lora=false)")
	fs.IntVar(&sf.kvTokens, "kv-tokens", 0, "KV cache capacity in `tokens` (0: the profile's)")
	fs.IntVar(&sf.maxNumSeqs, "max-num-seqs", 0, "requests running at most, `count` (0: the profile's); more wait, up to --max-waiting. A saturated engine: --max-num-seqs 2 --max-waiting 2")
	fs.IntVar(&sf.maxBatched, "max-num-batched-tokens", 0, "token budget of one scheduler step, `tokens`: decode tokens plus prefill chunks (0: the profile's)")
	fs.IntVar(&sf.maxModelLen, "max-model-len", 0, "longest prompt plus max_tokens, `tokens`; longer requests get 400 (0: the profile's, capped at --kv-tokens)")
	fs.DurationVar(&sf.stepBase, "step-base", 0, "simulated fixed cost of one scheduler step, `duration` (0: the profile's)")
	fs.DurationVar(&sf.prefillPerToken, "prefill-per-token", 0, "simulated cost of each uncached prompt token in a step, `duration` (0: the profile's)")
	fs.DurationVar(&sf.decodePerSq, "decode-per-seq", 0, "simulated cost of each decoding request in a step, `duration` (0: the profile's)")
	fs.Float64Var(&cfg.Speedup, "speedup", cfg.Speedup, "divide every simulated duration by this `factor` (1 to 1000); reported times stay simulated")
	fs.StringVar(&cfg.Tokenizer, "tokenizer", cfg.Tokenizer, "HuggingFace tokenizer.json `path` (or its directory, or .json.gz); empty: byte-block mode, 4 bytes of rendered prompt a token")
	fs.StringVar(&cfg.ChatTemplate, "chat-template", cfg.ChatTemplate, "chat template `name`: "+strings.Join(chatpkg.Names(), ", ")+"; empty: detect from the tokenizer_config.json beside the tokenizer")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "KV block size in `tokens` (vLLM's default; must be 16 in byte-block mode)")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "`seed` of the output text (a function of seed and prompt) and of --fail-rate's draws")
	fs.IntVar(&cfg.MaxWaiting, "max-waiting", cfg.MaxWaiting, "waiting requests at most, `count`; more are refused at once with --overload-status")
	fs.IntVar(&cfg.OverloadStatus, "overload-status", cfg.OverloadStatus, "HTTP `status` of a request refused over --max-waiting: 429 (as llm-d-inference-sim) or 503 (as vLLM's --max-num-queued-reqs); vLLM's error JSON, no Retry-After")
	fs.StringVar(&cfg.SchedulingPolicy, "scheduling-policy", cfg.SchedulingPolicy, "waiting queue order, `policy`, as vLLM's --scheduling-policy: fcfs (by arrival; a request with a non-zero \"priority\" gets vLLM's 400) or priority (lower \"priority\" first, then arrival)")
	fs.IntVar(&cfg.ResponseStore, "response-store", cfg.ResponseStore, "stored Responses API responses at most, `count`; the oldest is evicted")
	fs.IntVar(&cfg.ResponseStoreBytes, "response-store-bytes", cfg.ResponseStoreBytes, "stored Responses API conversations at most, in `bytes` of text; the oldest is evicted")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", cfg.MaxTokens, "output `tokens` of a request that names neither max_tokens nor max_completion_tokens")
	fs.Var(&sf.maxBody, "max-body", "largest request body, `size` (413 over it)")
	fs.Float64Var(&cfg.FailRate, "fail-rate", cfg.FailRate, "`fraction` of completion requests answered 503 at once (failure injection; also per request: header X-Sim-Fail: 503, reset or stall)")
}

// modelsFlag is --model: the first value given replaces the default
// primary model, later ones are ExtraModels. A value may hold several
// names, space-separated (names have no spaces).
type modelsFlag struct {
	cfg   *vllmsim.Config
	given bool
}

func (f *modelsFlag) String() string {
	if f.cfg == nil {
		return ""
	}
	return strings.Join(append([]string{f.cfg.Model}, f.cfg.ExtraModels...), " ")
}

func (f *modelsFlag) Set(v string) error {
	names := strings.Fields(v)
	if len(names) == 0 {
		return errors.New("empty model name")
	}
	for _, n := range names {
		if !f.given {
			f.cfg.Model, f.given = n, true
			continue
		}
		f.cfg.ExtraModels = append(f.cfg.ExtraModels, n)
	}
	return nil
}

// loraFlag is --lora-modules: each value one or more adapters, appended
// to LoRAModules (Config.Validate checks them).
type loraFlag struct{ cfg *vllmsim.Config }

func (f *loraFlag) String() string {
	if f.cfg == nil {
		return ""
	}
	items := make([]string, len(f.cfg.LoRAModules))
	for i, l := range f.cfg.LoRAModules {
		items[i] = l.Name + "=" + l.Path
	}
	return strings.Join(items, " ")
}

func (f *loraFlag) Set(v string) error {
	ls, err := parseLoRAModules(v)
	if err != nil {
		return err
	}
	f.cfg.LoRAModules = append(f.cfg.LoRAModules, ls...)
	return nil
}

// maxLoRAJSON bounds one JSON --lora-modules value (a name, a path and a
// base model name, with room for spacing).
const maxLoRAJSON = 16 << 10

// parseLoRAModules reads one --lora-modules value as vLLM's CLI does: a
// JSON object {"name","path","base_model_name"} (unknown keys refused,
// as LoRAModulePath(**d) refuses them), else name=path items separated
// by spaces (the first "=" splits: a path may hold more).
func parseLoRAModules(v string) ([]vllmsim.LoRA, error) {
	if t := strings.TrimSpace(v); strings.HasPrefix(t, "{") {
		if len(t) > maxLoRAJSON {
			return nil, fmt.Errorf("a JSON LoRA module larger than %d bytes", maxLoRAJSON)
		}
		var m struct {
			Name *string `json:"name"`
			Path *string `json:"path"`
			Base *string `json:"base_model_name"`
		}
		dec := json.NewDecoder(strings.NewReader(t))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("invalid JSON LoRA module %.200q: %w", t, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("invalid JSON LoRA module %.200q: more after the object", t)
		}
		if m.Name == nil || m.Path == nil {
			return nil, fmt.Errorf("invalid JSON LoRA module %.200q: name and path are required", t)
		}
		l := vllmsim.LoRA{Name: *m.Name, Path: *m.Path}
		if m.Base != nil {
			l.Base = *m.Base
		}
		return []vllmsim.LoRA{l}, nil
	}
	items := strings.Fields(v)
	if len(items) == 0 {
		return nil, errors.New("empty LoRA module: want name=path or JSON")
	}
	ls := make([]vllmsim.LoRA, 0, len(items))
	for _, it := range items {
		name, path, ok := strings.Cut(it, "=")
		if !ok || name == "" || path == "" {
			return nil, fmt.Errorf("LoRA module %.200q: want name=path or JSON", it)
		}
		ls = append(ls, vllmsim.LoRA{Name: name, Path: path})
	}
	return ls, nil
}

// spreadFlagValues rewrites the arguments that follow a --model or
// --lora-modules value and are not flags into more of that flag, so
// `--lora-modules x=/p y=/q` reads as vLLM's nargs='+' does (Go's flag
// package takes one value a flag). `saltus sim` takes no positional
// arguments, so such words have no other meaning. A "--" ends the flags.
func spreadFlagValues(args []string, names ...string) []string {
	out := make([]string, 0, len(args))
	multi := "" // the multi-value flag whose values may follow
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if multi != "" {
				out = append(out, "--"+multi)
			}
			out = append(out, a)
			continue
		}
		out = append(out, a)
		multi = ""
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !slices.Contains(names, name) {
			continue
		}
		multi = name
		if !hasValue && i+1 < len(args) {
			i++
			out = append(out, args[i]) // the flag's own value, whatever it looks like
		}
	}
	return out
}

// applySimProfile sets the profile's values, then the flags that override
// them, and validates the result.
func applySimProfile(cfg *vllmsim.Config, sf *simFlags) error {
	p, ok := vllmsim.Profiles[sf.profile]
	if !ok {
		return fmt.Errorf("vllmsim: profile: unknown %q, want one of %s", sf.profile, strings.Join(vllmsim.ProfileNames(), ", "))
	}
	cfg.Profile = p
	for _, o := range []struct {
		v   int
		dst *int
	}{{sf.kvTokens, &cfg.KVTokens}, {sf.maxNumSeqs, &cfg.MaxNumSeqs}, {sf.maxBatched, &cfg.MaxBatchedTokens}, {sf.maxModelLen, &cfg.MaxModelLen}} {
		if o.v != 0 {
			*o.dst = o.v
		}
	}
	for _, o := range []struct {
		v   time.Duration
		dst *time.Duration
	}{{sf.prefillPerToken, &cfg.PrefillPerToken}, {sf.stepBase, &cfg.StepBase}, {sf.decodePerSq, &cfg.DecodePerSeq}} {
		if o.v != 0 {
			*o.dst = o.v
		}
	}
	cfg.MaxBody = int(min(sf.maxBody, 1<<40)) // Validate bounds it further
	return cfg.Validate()
}

// profileTable describes the profiles for --help.
func profileTable() string {
	var b strings.Builder
	for _, name := range vllmsim.ProfileNames() {
		p := vllmsim.Profiles[name]
		fmt.Fprintf(&b, "  %-9s step %v + %v per prefill token + %v per decoding request;\n            %d tokens a step, %d running at most, KV %d tokens, max-model-len %d\n",
			name, p.StepBase, p.PrefillPerToken, p.DecodePerSeq, p.MaxBatchedTokens, p.MaxNumSeqs, p.KVTokens, p.MaxModelLen)
	}
	return b.String()
}

// runSim is `saltus sim`: one simulated vLLM engine until SIGTERM/SIGINT.
func runSim(args []string, stdout, stderr io.Writer) int {
	// Buffered: a signal that arrives while starting is kept.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	return simWith(args, stdout, stderr, signals)
}

// simOptions are `saltus sim`'s parsed flags.
type simOptions struct {
	cfg              vllmsim.Config // validated
	listen, logLevel string
}

// parseSim parses `saltus sim`'s arguments into a validated config. A
// code of 0 or more says to exit with it (0 after --help, 2 for a bad
// flag, reported on stderr); -1 to go on.
func parseSim(args []string, stderr io.Writer) (simOptions, int) {
	fs := flag.NewFlagSet("saltus sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := simOptions{cfg: vllmsim.DefaultConfig()}
	var sf simFlags
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8001", "`host:port` to serve the OpenAI-compatible API on")
	fs.StringVar(&o.logLevel, "log-level", "info", "`level`: debug, info, warn or error")
	addSimFlags(fs, &o.cfg, &sf)
	addSimKVEventFlags(fs, &o.cfg.KVEvents)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: saltus sim [flags]\n\n"+
			"A simulated vLLM engine: OpenAI-compatible API (chat and completions, streamed or not,\n"+
			"/tokenize, /v1/models, /health, /metrics with vLLM's names), a prefix cache of KV blocks,\n"+
			"continuous batching with chunked prefill, and a timing profile. It serves the --model names\n"+
			"and --lora-modules adapters only (404 for others, as vLLM), each with its own cached blocks,\n"+
			"and loads and unloads adapters at run time (POST /v1/load_lora_adapter and\n"+
			"/v1/unload_lora_adapter, vLLM's JSON bodies). Times are simulated:\n"+
			"a step lasts step-base + prefill-per-token × prefill tokens + decode-per-seq × decoding\n"+
			"requests, divided by --speedup in real time.\n\n"+
			"A saturated engine, for overload handling: --max-num-seqs 2 --max-waiting 2 --overload-status 429\n"+
			"runs 2 requests, queues 2 and refuses the rest at once (429, or 503); add --scheduling-policy\n"+
			"priority to serve waiting requests by their \"priority\" (lower first), as vLLM does.\n\n"+
			"KV events: --kv-events publishes the cache's BlockStored, BlockRemoved and AllBlocksCleared\n"+
			"as vLLM's --kv-events-config does (ZMQ PUB, msgpack KVEventBatch); POST /reset_prefix_cache\n"+
			"clears the cache when nothing runs. --kv-events-replay binds vLLM's replay socket, which answers\n"+
			"a subscriber's request for the batches it missed from the last --kv-events-replay-buffer.\n\n"+
			"Profiles:\n"+profileTable()+"\nFlags:\n")
		printFlags(stderr, fs, nil)
	}
	if err := fs.Parse(spreadFlagValues(args, "model", "lora-modules")); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, 0
		}
		return o, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "saltus sim: unexpected argument %q\n", fs.Arg(0))
		return o, 2
	}
	if err := applySimProfile(&o.cfg, &sf); err != nil {
		for line := range strings.SplitSeq(err.Error(), "\n") { // one per invalid field
			fmt.Fprintf(stderr, "saltus sim: %s\n", line)
		}
		return o, 2
	}
	return o, -1
}

// simWith is runSim with the signals given: it serves until the first.
func simWith(args []string, stdout, stderr io.Writer, signals <-chan os.Signal) int {
	o, code := parseSim(args, stderr)
	if code >= 0 {
		return code
	}
	cfg := o.cfg
	logger, err := newLogger(stderr, "text", o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "saltus sim: %v\n", err)
		return 2
	}
	s, err := vllmsim.New(cfg, logger)
	if err == nil {
		err = s.Start(o.listen)
	}
	if err != nil {
		fmt.Fprintf(stderr, "saltus sim: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "simulated engine %s (%s, speedup %g) on %s\n", cfg.Model, cfg.Name, cfg.Speedup, s.URL())
	sig := <-signals
	componentLogger(logger, "sim").Info("stopping", "signal", sig.String())
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		fmt.Fprintf(stderr, "saltus sim: %v\n", err)
		return 1
	}
	return 0
}

// addSimKVEventFlags registers `saltus sim`'s KV-event flags, vLLM's
// --kv-events-config fields (only saltus sim has them: bench runs
// several engines in one process).
func addSimKVEventFlags(fs *flag.FlagSet, k *vllmsim.KVEventsConfig) {
	fs.BoolVar(&k.Enable, "kv-events", false, "publish KV-cache events as vLLM's --kv-events-config enable_kv_cache_events does: a ZMQ PUB socket sending msgpack KVEventBatch messages [topic, seq, payload] (default false)")
	fs.StringVar(&k.Endpoint, "kv-events-endpoint", vllmsim.DefaultKVEventsEndpoint, "the PUB socket's `endpoint`, tcp://HOST:PORT: with * or :: it binds and subscribers connect (vLLM's default); otherwise it connects to a router that binds (llm-d's wiring)")
	fs.StringVar(&k.Topic, "kv-events-topic", "", "every message's `topic` (default empty, as vLLM's; llm-d's wiring names the engine: kv@IP:PORT@MODEL)")
	fs.StringVar(&k.HashForm, "kv-events-hash", "bytes", "block hash `form`: bytes (32 bytes, as vLLM's sha256 hashes) or int (64 bits, as older vLLM)")
	fs.StringVar(&k.Encoding, "kv-events-encoding", "map", "payload `layout`: map (vLLM since PR 42892) or array (msgspec array_like, older vLLM)")
	fs.IntVar(&k.Queue, "kv-events-queue", 1024, "batches waiting to be sent at most, `count`; past it one is dropped and counted (vllmsim_kv_events_dropped_total), its sequence number skipped")
	fs.StringVar(&k.ReplayEndpoint, "kv-events-replay", "", "the replay socket's `endpoint`, tcp://HOST:PORT, which it binds (vLLM's replay_endpoint, e.g. tcp://*:5558): a subscriber that missed batches asks it for them; empty: none")
	fs.IntVar(&k.ReplayBuffer, "kv-events-replay-buffer", 10000, "batches kept for replay, the most recent, `count` (vLLM's buffer_steps; at most 100000)")
	fs.IntVar(&k.LoseEvery, "kv-events-lose-every", 0, "fault injection: one batch in `N` is not sent on the PUB socket but kept for replay, so a subscriber sees a gap; 0: none")
}
