package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/saltus-lb/saltus/bench/vllmsim"
)

// simFlags registers the simulated engine's flags on fs over cfg; profile
// is applied by applySimProfile after parsing (so flags given win).
type simFlags struct {
	profile                             string
	kvTokens, maxNumSeqs, maxBatched    int
	prefillPerToken, stepBase, decodeTk time.Duration
}

func addSimFlags(fs *flag.FlagSet, cfg *vllmsim.Config, sf *simFlags) {
	fs.StringVar(&sf.profile, "profile", "a100-13b", "engine `profile`: "+strings.Join(vllmsim.ProfileNames(), ", ")+" (bench/vllmsim/doc.go gives their sources)")
	fs.StringVar(&cfg.Model, "model", cfg.Model, "served model `name`")
	fs.IntVar(&sf.kvTokens, "kv-tokens", 0, "KV cache capacity in `tokens` (0: the profile's)")
	fs.IntVar(&sf.maxNumSeqs, "max-num-seqs", 0, "running requests at most, `count` (0: the profile's)")
	fs.IntVar(&sf.maxBatched, "max-num-batched-tokens", 0, "token budget of one scheduler step, `tokens` (0: the profile's)")
	fs.DurationVar(&sf.prefillPerToken, "prefill-per-token", 0, "simulated prefill cost per uncached prompt token, `duration` (0: the profile's)")
	fs.DurationVar(&sf.stepBase, "step-base", 0, "simulated fixed cost of one scheduler step, `duration` (0: the profile's)")
	fs.DurationVar(&sf.decodeTk, "decode-per-seq", 0, "simulated cost per decoding request in a step, `duration` (0: the profile's)")
	fs.Float64Var(&cfg.Speedup, "speedup", cfg.Speedup, "divide every simulated duration by this `factor` (≥ 1)")
	fs.StringVar(&cfg.Tokenizer, "tokenizer", cfg.Tokenizer, "HuggingFace tokenizer.json `path`; empty: byte-block mode (4 bytes of rendered prompt per token)")
	fs.StringVar(&cfg.ChatTemplate, "chat-template", cfg.ChatTemplate, "chat template `name`; empty: detect from tokenizer_config.json")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "KV block size in `tokens` (vLLM: 16)")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "output text `seed`")
	fs.IntVar(&cfg.MaxWaiting, "max-waiting", cfg.MaxWaiting, "waiting requests at most, `count`; more get 503")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", cfg.MaxTokens, "output `tokens` when a request names none")
	fs.Float64Var(&cfg.FailRate, "fail-rate", cfg.FailRate, "`fraction` of requests answered 503 at once (failure injection)")
}

// applySimProfile sets the profile's values, then the flags that override
// them.
func applySimProfile(cfg *vllmsim.Config, sf *simFlags) error {
	p, ok := vllmsim.Profiles[sf.profile]
	if !ok {
		names := vllmsim.ProfileNames()
		sort.Strings(names)
		return fmt.Errorf("profile: unknown %q, want one of %s", sf.profile, strings.Join(names, ", "))
	}
	cfg.Profile = p
	for _, o := range []struct {
		v   int
		dst *int
	}{{sf.kvTokens, &cfg.KVTokens}, {sf.maxNumSeqs, &cfg.MaxNumSeqs}, {sf.maxBatched, &cfg.MaxBatchedTokens}} {
		if o.v != 0 {
			*o.dst = o.v
		}
	}
	for _, o := range []struct {
		v   time.Duration
		dst *time.Duration
	}{{sf.prefillPerToken, &cfg.PrefillPerToken}, {sf.stepBase, &cfg.StepBase}, {sf.decodeTk, &cfg.DecodePerSeq}} {
		if o.v != 0 {
			*o.dst = o.v
		}
	}
	return cfg.Validate()
}

// runSim is `saltus sim`: one simulated vLLM engine until SIGTERM/SIGINT.
func runSim(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("saltus sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := vllmsim.DefaultConfig()
	var sf simFlags
	listen := fs.String("listen", "127.0.0.1:8001", "`host:port` to serve the OpenAI-compatible API on")
	addSimFlags(fs, &cfg, &sf)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: saltus sim [flags]\n\nA simulated vLLM engine: OpenAI-compatible API, prefix cache, continuous batching\nand a timing profile (bench/vllmsim). Flags:\n\n")
		fs.PrintDefaults()
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
		fmt.Fprintf(stderr, "saltus sim: %v\n", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	s, err := vllmsim.New(cfg, logger)
	if err == nil {
		err = s.Start(*listen)
	}
	if err != nil {
		fmt.Fprintf(stderr, "saltus sim: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "simulated engine %s (%s, speedup %g) on %s\n", cfg.Model, cfg.Name, cfg.Speedup, s.URL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		fmt.Fprintf(stderr, "saltus sim: shutdown: %v\n", err)
		return 1
	}
	return 0
}
