package chat

import (
	"errors"
	"fmt"
	"os"
)

// Load builds the chat renderer for the tokenizer at path (its
// tokenizer.json, directory or .json.gz): the template named, or else the
// one recognized from the tokenizer_config.json beside it. When none is recognized it renders with `none` and returns
// why as warn (DESIGN.md § Stage 3: unknown template → none + a warning).
// The config still supplies bos/eos to a named template.
func Load(vocab Vocab, path, name string) (r *Renderer, used string, warn, err error) {
	cfg, cfgErr := LoadConfig(ConfigPath(path))
	if name == "" {
		switch {
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
