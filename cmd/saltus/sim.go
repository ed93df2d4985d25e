package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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
	fs.StringVar(&cfg.Model, "model", cfg.Model, "served model `name`")
	fs.IntVar(&sf.kvTokens, "kv-tokens", 0, "KV cache capacity in `tokens` (0: the profile's)")
	fs.IntVar(&sf.maxNumSeqs, "max-num-seqs", 0, "requests running at most, `count` (0: the profile's)")
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
	fs.IntVar(&cfg.MaxWaiting, "max-waiting", cfg.MaxWaiting, "waiting requests at most, `count`; more get 503")
	fs.IntVar(&cfg.ResponseStore, "response-store", cfg.ResponseStore, "stored Responses API responses at most, `count`; the oldest is evicted")
	fs.IntVar(&cfg.ResponseStoreBytes, "response-store-bytes", cfg.ResponseStoreBytes, "stored Responses API conversations at most, in `bytes` of text; the oldest is evicted")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", cfg.MaxTokens, "output `tokens` of a request that names neither max_tokens nor max_completion_tokens")
	fs.Var(&sf.maxBody, "max-body", "largest request body, `size` (413 over it)")
	fs.Float64Var(&cfg.FailRate, "fail-rate", cfg.FailRate, "`fraction` of completion requests answered 503 at once (failure injection; also per request: header X-Sim-Fail: 503, reset or stall)")
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

// simWith is runSim with the signals given: it serves until the first.
func simWith(args []string, stdout, stderr io.Writer, signals <-chan os.Signal) int {
	fs := flag.NewFlagSet("saltus sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := vllmsim.DefaultConfig()
	var sf simFlags
	listen := fs.String("listen", "127.0.0.1:8001", "`host:port` to serve the OpenAI-compatible API on")
	logLevel := fs.String("log-level", "info", "`level`: debug, info, warn or error")
	addSimFlags(fs, &cfg, &sf)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: saltus sim [flags]\n\n"+
			"A simulated vLLM engine: OpenAI-compatible API (chat and completions, streamed or not,\n"+
			"/tokenize, /v1/models, /health, /metrics with vLLM's names), a prefix cache of KV blocks,\n"+
			"continuous batching with chunked prefill, and a timing profile. Times are simulated:\n"+
			"a step lasts step-base + prefill-per-token × prefill tokens + decode-per-seq × decoding\n"+
			"requests, divided by --speedup in real time.\n\nProfiles:\n"+profileTable()+"\nFlags:\n")
		printFlags(stderr, fs, nil)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "saltus sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := applySimProfile(&cfg, &sf); err != nil {
		for line := range strings.SplitSeq(err.Error(), "\n") { // one per invalid field
			fmt.Fprintf(stderr, "saltus sim: %s\n", line)
		}
		return 2
	}
	logger, err := newLogger(stderr, "text", *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "saltus sim: %v\n", err)
		return 2
	}
	s, err := vllmsim.New(cfg, logger)
	if err == nil {
		err = s.Start(*listen)
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
