package chat

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Built-in template names.
const (
	// None renders each message's content as its own text segment, with
	// no special tokens: consistent keys for a model whose template is not
	// known, not the engine's tokens.
	None = "none"
	// Llama3 is Meta-Llama-3-Instruct's template (header tokens, trimmed
	// content, <|eot_id|>).
	Llama3 = "llama3"
	// ChatML is the classic ChatML template: <|im_start|>role\ncontent<|im_end|>\n.
	ChatML = "chatml"
	// Qwen3 is ChatML plus Qwen3's <think> handling (see the package doc).
	Qwen3 = "qwen3"
	// Mistral is Mistral-7B-Instruct-v0.1's [INST] template.
	Mistral = "mistral"
	// Llama2 is Llama-2-chat's [INST] <<SYS>> template.
	Llama2 = "llama2"
	// Harmony is gpt-oss's format, as vLLM renders a chat request for it
	// with the openai_harmony library instead of a Jinja template
	// (harmony.go).
	Harmony = "harmony"
)

// Names lists the built-in templates, for flag help and errors.
func Names() []string { return []string{Llama3, ChatML, Qwen3, Mistral, Llama2, Harmony, None} }

func known(name string) bool {
	for _, n := range Names() {
		if n == name {
			return true
		}
	}
	return false
}

// ErrNotRecognized: the tokenizer's chat template is absent or matches
// none of the built-in templates. DESIGN.md § Stage 3: the caller renders
// with None and warns once.
var ErrNotRecognized = errors.New("chat template not recognized")

// Config is what a renderer needs from a model's tokenizer_config.json.
type Config struct {
	// Template is the chat_template text ("" when the file has none; the
	// "default" entry when it lists several named templates).
	Template string
	// BOS and EOS are bos_token and eos_token ("" when null or absent).
	BOS, EOS string
	// Specials are the other special tokens by field name (unk_token,
	// pad_token, ...: every top-level field ending in "_token" that holds a
	// string or an AddedToken), which a Jinja template sees as variables.
	Specials map[string]string
	// Added are the contents of added_tokens_decoder: where a Jinja
	// template's rendering is split into special segments.
	Added []string
}

// ParseConfig reads the fields of a tokenizer_config.json that Config
// holds. bos_token and eos_token may be a string or an object with a
// "content" string (an AddedToken); chat_template may be a string or a
// list of {"name", "template"}.
func ParseConfig(raw []byte) (Config, error) {
	var f struct {
		Template json.RawMessage `json:"chat_template"`
		BOS      json.RawMessage `json:"bos_token"`
		EOS      json.RawMessage `json:"eos_token"`
		Added    map[string]struct {
			Content string `json:"content"`
		} `json:"added_tokens_decoder"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return Config{}, fmt.Errorf("cannot parse tokenizer_config.json: %w", err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw, &all); err != nil {
		return Config{}, fmt.Errorf("cannot parse tokenizer_config.json: %w", err)
	}
	var c Config
	for k, v := range all {
		if !strings.HasSuffix(k, "_token") || k == "bos_token" || k == "eos_token" {
			continue
		}
		// A field that is not a token (e.g. add_bos_token's bool) is not one.
		if s, err := tokenString(v); err == nil && s != "" {
			if c.Specials == nil {
				c.Specials = map[string]string{}
			}
			c.Specials[k] = s
		}
	}
	ids := make([]string, 0, len(f.Added))
	for id := range f.Added {
		ids = append(ids, id)
	}
	slices.Sort(ids) // a stable order; the splitter sorts by length
	for _, id := range ids {
		if a := f.Added[id].Content; a != "" {
			c.Added = append(c.Added, a)
		}
	}
	var err error
	if c.BOS, err = tokenString(f.BOS); err != nil {
		return Config{}, fmt.Errorf("tokenizer_config.json bos_token: %w", err)
	}
	if c.EOS, err = tokenString(f.EOS); err != nil {
		return Config{}, fmt.Errorf("tokenizer_config.json eos_token: %w", err)
	}
	if len(f.Template) == 0 || string(f.Template) == "null" {
		return c, nil
	}
	if json.Unmarshal(f.Template, &c.Template) == nil {
		return c, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(f.Template, &named); err != nil {
		return Config{}, errors.New("tokenizer_config.json chat_template: want a string or a list of {name, template}")
	}
	for _, n := range named {
		if n.Name == "default" {
			c.Template = n.Template
			return c, nil
		}
	}
	return Config{}, errors.New(`tokenizer_config.json chat_template: the list has no "default" template`)
}

func tokenString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var o struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.Content == nil {
		return "", errors.New(`want a string or an object with a "content" string`)
	}
	return *o.Content, nil
}

// ConfigPath returns where the tokenizer_config.json of a tokenizer file
// sits: the same directory (tokenizer.json, tokenizer.json.gz, or the
// directory itself).
func ConfigPath(tokenizerPath string) string {
	if st, err := os.Stat(tokenizerPath); err == nil && st.IsDir() {
		return filepath.Join(tokenizerPath, "tokenizer_config.json")
	}
	return filepath.Join(filepath.Dir(tokenizerPath), "tokenizer_config.json")
}

// LoadConfig reads a tokenizer_config.json. When it has no chat_template,
// a chat_template.jinja in the same directory supplies it (where newer
// transformers versions save the template).
func LoadConfig(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("cannot read tokenizer config: %w", err)
	}
	c, err := ParseConfig(raw)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if c.Template == "" {
		jinja := filepath.Join(filepath.Dir(path), "chat_template.jinja")
		t, err := os.ReadFile(jinja)
		switch {
		case err == nil:
			c.Template = string(t)
		case !errors.Is(err, os.ErrNotExist):
			return Config{}, fmt.Errorf("cannot read chat template: %w", err)
		}
	}
	return c, nil
}

// knownTemplates maps the SHA-256 of a chat_template text (outer
// whitespace trimmed) to the built-in template that renders it exactly.
// Only texts whose rendering the goldens check are listed (TestDetect reads
// them from testdata/chat/templates.json): a template that merely looks
// similar is not recognized, because rendering it "nearly" would give keys
// the engine never computes.
var knownTemplates = map[string]string{
	// Meta-Llama-3-8B-Instruct (testdata/models/llama3).
	"ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122": Llama3,
	// Qwen3 (testdata/models/qwen3).
	"87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5": Qwen3,
	// Classic ChatML (HuggingFace's chat templating docs).
	"fcf7a096fe99a48fd9ad2b250bf9237e96e8f48bffec1c7ea4d3f225176cd40e": ChatML,
	// Mistral-7B-Instruct-v0.1, Mixtral-8x7B-Instruct-v0.1.
	"26a59556925c987317ce5291811ba3b7f32ec4c647c400c6cc7e3a9993007ba7": Mistral,
	// meta-llama/Llama-2-7b-chat-hf.
	"e8d5b5a546d3f19df16a5320c614fab05bdc4edd50e850f1afd947b503ea41cf": Llama2,
}

// Detect names the built-in template that renders the chat_template text
// exactly, or returns an error wrapping ErrNotRecognized.
func Detect(template string) (string, error) {
	t := strings.TrimSpace(template)
	if t == "" {
		return "", fmt.Errorf("%w: the tokenizer config has no chat_template", ErrNotRecognized)
	}
	sum := sha256.Sum256([]byte(t))
	h := fmt.Sprintf("%x", sum)
	if name, ok := knownTemplates[h]; ok {
		return name, nil
	}
	return "", fmt.Errorf("%w: chat_template (%d bytes, sha256 %.16s) is none of the built-in ones; choose one by name (%s)", ErrNotRecognized, len(t), h, strings.Join(Names(), ", "))
}
