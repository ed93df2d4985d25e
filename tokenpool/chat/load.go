package chat

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Load builds the chat renderer for the tokenizer at path (its
// tokenizer.json, directory or .json.gz): the template named, or else the
// one recognized from the tokenizer_config.json beside it (harmony for a
// tokenizer with harmony's formatting tokens and no chat template, as
// gpt-oss ships). When none is recognized it renders with `none` and returns
// why as warn (DESIGN.md § Stage 3: unknown template → none + a warning).
// The config still supplies bos/eos to a named template.
//
// Load is LoadTemplate without a template file: it never renders Jinja,
// for callers that want the built-ins only.
func Load(vocab Vocab, path, name string) (r *Renderer, used string, warn, err error) {
	cfg, cfgErr := LoadConfig(ConfigPath(path))
	if name == "" {
		switch {
		case (cfgErr == nil && strings.TrimSpace(cfg.Template) == "" || errors.Is(cfgErr, os.ErrNotExist)) && hasHarmonyTokens(vocab):
			// gpt-oss: vLLM renders its chats with openai_harmony, and
			// its tokenizer config carries no template.
			name = Harmony
		case cfgErr != nil && errors.Is(cfgErr, os.ErrNotExist):
			warn = fmt.Errorf("%w: %v", ErrNotRecognized, cfgErr)
		case cfgErr != nil:
			warn = cfgErr
		default:
			name, warn = Detect(cfg.Template)
		}
		if warn != nil {
			name = None
		}
	} else if cfgErr != nil && !errors.Is(cfgErr, os.ErrNotExist) {
		return nil, "", nil, cfgErr
	}
	r, err = New(name, vocab, cfg)
	if err != nil {
		return nil, "", nil, err
	}
	return r, name, warn, nil
}

// MaxTemplateFile bounds a chat template file (the largest on the hub are
// tens of kilobytes).
const MaxTemplateFile = 1 << 20

// LoadTemplate builds the chat renderer for the tokenizer at path, from,
// in this order: the built-in template named (name), the Jinja template
// in the file (file), or the tokenizer_config.json beside the tokenizer:
// a chat_template a built-in renders exactly (Detect) takes the built-in,
// the fast path; any other renders as Jinja (NewJinja). With no template
// there, or one package jinja cannot compile, it renders with `none` and returns
// why as warn. name and file together are an error. used names what
// renders: a built-in's name, or "jinja" and where from.
func LoadTemplate(vocab Vocab, path, name, file string) (r *Renderer, used string, warn, err error) {
	if name != "" && file != "" {
		return nil, "", nil, errors.New("a chat template by name and a chat template file exclude each other")
	}
	if file == "" {
		r, used, warn, err = Load(vocab, path, name)
		if err == nil && name == "" && warn == nil {
			// A built-in recognized from the model's own template: that
			// template renders the requests with tools (withTools).
			attachTools(r, vocab, path)
		}
		if err != nil || name != "" || !errors.Is(warn, ErrNotRecognized) {
			return r, used, warn, err
		}
	}
	cfg, cfgErr := LoadConfig(ConfigPath(path))
	if cfgErr != nil && !(file != "" && errors.Is(cfgErr, os.ErrNotExist)) {
		return r, used, warn, nil // Load's none and warning stand
	}
	if len(cfg.Added) == 0 {
		// DeepSeek V3's config lists no added_tokens_decoder: its
		// tokenizer.json does.
		if cfg.Added, err = addedTokens(path); err != nil {
			return nil, "", nil, err
		}
	}
	source, from := cfg.Template, ConfigPath(path)
	if file != "" {
		raw, err := readTemplateFile(file)
		if err != nil {
			return nil, "", nil, err
		}
		source, from = string(raw), file
	} else if strings.TrimSpace(source) == "" {
		return r, used, warn, nil
	}
	j, jerr := NewJinja(source, vocab, cfg)
	if jerr != nil {
		if file != "" {
			return nil, "", nil, fmt.Errorf("%s: %w", file, jerr)
		}
		return r, used, fmt.Errorf("%w: %s: %v", ErrNotRecognized, from, jerr), nil
	}
	return j, Jinja + " (" + from + ")", nil, nil
}

// attachTools gives the built-in r, recognized from the chat_template of
// the tokenizer at path, that template as its renderer of requests with
// tools or tool calls, when the template reads them and the built-in
// does not render them (see Renderer.withTools). A template that does not
// compile leaves r as it is: the built-in renders those requests as
// before.
func attachTools(r *Renderer, vocab Vocab, path string) {
	if r.name != Qwen3 {
		return // the other built-ins' templates render no tools
	}
	cfg, err := LoadConfig(ConfigPath(path))
	if err != nil || !strings.Contains(cfg.Template, "tool") {
		return
	}
	if len(cfg.Added) == 0 {
		if cfg.Added, err = addedTokens(path); err != nil {
			return
		}
	}
	if j, err := NewJinja(cfg.Template, vocab, cfg); err == nil {
		r.withTools = j
	}
}

func readTemplateFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("cannot read chat template file: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, MaxTemplateFile+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read chat template file: %w", err)
	}
	if len(raw) > MaxTemplateFile {
		return nil, fmt.Errorf("chat template file %s is larger than %d KiB", file, MaxTemplateFile>>10)
	}
	return raw, nil
}

// addedTokens reads the contents of the added_tokens of the tokenizer at
// path (tokenizer.json, a directory holding one, or .json.gz); none when
// it cannot be read (the caller's tokenizer load reports that).
func addedTokens(path string) ([]string, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil // no file: the tokenizer's own load reports it
	}
	defer f.Close()
	var rd io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("cannot read %s: %w", path, err)
		}
		rd = zr
	}
	var tj struct {
		Added []struct {
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	if err := json.NewDecoder(rd).Decode(&tj); err != nil {
		return nil, fmt.Errorf("cannot parse %s: %w", path, err)
	}
	out := make([]string, 0, len(tj.Added))
	for _, a := range tj.Added {
		out = append(out, a.Content)
	}
	return out, nil
}
