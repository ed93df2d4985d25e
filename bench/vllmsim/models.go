package vllmsim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/saltus-lb/saltus/tree"
)

// The names an engine serves, as vLLM's OpenAIServingModels holds them:
// base models (Config.Model, then ExtraModels) and LoRA adapters
// (Config.LoRAModules, then those loaded at run time). GET /v1/models
// lists them; a request's "model" picks one (vLLM's _check_model: any
// other is a 404); the one picked seeds its prompt's block hashes.

// servedModel is one name an engine serves. Immutable.
type servedModel struct {
	name   string
	quoted []byte // name as a JSON string (validModel: no escapes needed)
	// parent is an adapter's base model; "" for a base model.
	parent string
	// root is /v1/models' root as a JSON string: the name for a base
	// model (the simulator has no weights path), the path for an adapter.
	root []byte
	// The seeds of the prompt's block hashes: a name's cached blocks are
	// its own (doc.go, Prefix cache).
	tokenSeed uint64 // tree.ModelSeed(name): token-id chains
	byteSeed  uint64 // tree.ByteBlockSeed(name): byte-block chains
	// load counts an adapter's requests waiting and running, for
	// vllm:lora_requests_info; nil for a base model. An in-place reload
	// keeps it.
	load *loraLoad
}

func newServedModel(name, parent, root string, load *loraLoad) *servedModel {
	r, err := json.Marshal(root)
	if err != nil {
		panic("BUG: cannot encode a string: " + err.Error())
	}
	return &servedModel{name: name, quoted: strconv.AppendQuote(nil, name), parent: parent, root: r,
		tokenSeed: tree.ModelSeed(name), byteSeed: tree.ByteBlockSeed(name), load: load}
}

// loraLoad counts one adapter's requests in the engine. The handler
// counts a request waiting when it submits it (under engine.mu), the
// scheduler moves it to running at admission and uncounts it when it
// ends (seq.end). Any goroutine reads it.
type loraLoad struct {
	waiting, running atomic.Int64
}

// modelSet is one immutable snapshot of the served names.
type modelSet struct {
	byName map[string]*servedModel
	// list is the order of /v1/models: base models in Config order, then
	// adapters in load order (an in-place reload keeps its place).
	list  []*servedModel
	loras int // adapters in list
}

// with returns a copy of ms with m added at the end, or in place of the
// adapter of its name.
func (ms *modelSet) with(m *servedModel) *modelSet {
	n := &modelSet{byName: make(map[string]*servedModel, len(ms.byName)+1), list: make([]*servedModel, 0, len(ms.list)+1), loras: ms.loras}
	replaced := false
	for _, o := range ms.list {
		if o.name == m.name {
			o, replaced = m, true
		}
		n.list = append(n.list, o)
		n.byName[o.name] = o
	}
	if !replaced {
		n.list = append(n.list, m)
		n.byName[m.name] = m
		n.loras++
	}
	return n
}

// without returns a copy of ms without the adapter name.
func (ms *modelSet) without(name string) *modelSet {
	n := &modelSet{byName: make(map[string]*servedModel, len(ms.byName)), list: make([]*servedModel, 0, len(ms.list)), loras: ms.loras - 1}
	for _, o := range ms.list {
		if o.name != name {
			n.list = append(n.list, o)
			n.byName[o.name] = o
		}
	}
	return n
}

// models holds an engine's served names. Requests read the current set
// without a lock (an immutable snapshot behind an atomic pointer); loads
// and unloads serialize on mu and swap in a new set before they answer,
// so a /v1/models after a load's 200 lists the adapter. Safe for
// concurrent use.
type models struct {
	primary *servedModel
	max     int // Config.MaxLoRAs
	maxLen  int // Config.maxModelLen(): base models' max_model_len

	mu  sync.Mutex // serializes writers of cur
	cur atomic.Pointer[modelSet]
}

// newModels builds the set from a validated Config.
func newModels(cfg Config) *models {
	ms := &modelSet{byName: make(map[string]*servedModel)}
	add := func(m *servedModel) {
		ms.byName[m.name] = m
		ms.list = append(ms.list, m)
	}
	for _, name := range append([]string{cfg.Model}, cfg.ExtraModels...) {
		add(newServedModel(name, "", name, nil))
	}
	for _, l := range cfg.LoRAModules {
		base := l.Base
		if base == "" {
			base = cfg.Model
		}
		add(newServedModel(l.Name, base, l.Path, &loraLoad{}))
		ms.loras++
	}
	m := &models{primary: ms.list[0], max: cfg.MaxLoRAs, maxLen: cfg.maxModelLen()}
	m.cur.Store(ms)
	return m
}

// resolve returns the served model a request names: the primary one for
// "", else vLLM's 404. Any goroutine.
func (m *models) resolve(name string) (*servedModel, *apiError) {
	if name == "" {
		return m.primary, nil
	}
	if sm := m.cur.Load().byName[name]; sm != nil {
		return sm, nil
	}
	return nil, modelNotFound(name)
}

// invalidInput is vLLM's error for a LoRA request its checks refuse.
func invalidInput(format string, args ...any) *apiError {
	return &apiError{status: fasthttp.StatusBadRequest, msg: fmt.Sprintf(format, args...), vllmType: "InvalidUserInput"}
}

// load adds the adapter name at path (parent: the primary model), or
// with inplace replaces the one of that name, as vLLM's
// load_lora_adapter; it returns vLLM's success message. Any goroutine.
func (m *models) load(name, path string, inplace bool) (string, *apiError) {
	if name == "" || path == "" {
		return "", invalidInput("Both 'lora_name' and 'lora_path' must be provided.")
	}
	// The simulator's own bounds: the name goes into JSON and metric
	// labels unescaped (vLLM takes any string).
	if !validModel(name) {
		return "", invalidInput("The lora adapter name must be 1 to %d characters among letters, digits and %s, got %.256q.", maxModelName, modelPunct, name)
	}
	if len(path) > maxLoRAPath {
		return "", invalidInput("The lora adapter path must be at most %d bytes, got %d.", maxLoRAPath, len(path))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.cur.Load()
	old := cur.byName[name]
	switch {
	case old != nil && old.parent == "":
		return "", invalidInput("The lora adapter '%s' cannot be loaded: a base model has that name.", name)
	case old != nil && !inplace:
		return "", invalidInput("The lora adapter '%s' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", name)
	case old == nil && cur.loras >= m.max:
		return "", invalidInput("The lora adapter '%s' cannot be loaded: %d adapters are loaded, the most this engine holds (max-loras). Unload one first.", name, m.max)
	}
	load := &loraLoad{}
	if old != nil {
		load = old.load // the same adapter, its requests still counted
	}
	m.cur.Store(cur.with(newServedModel(name, m.primary.name, path, load)))
	return fmt.Sprintf("Success: LoRA adapter '%s' added successfully.", name), nil
}

// unload removes the adapter name, as vLLM's unload_lora_adapter; it
// returns vLLM's success message. Requests it is serving finish. Any
// goroutine.
func (m *models) unload(name string) (string, *apiError) {
	if name == "" {
		return "", invalidInput("'lora_name' needs to be provided to unload a LoRA adapter.")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.cur.Load()
	if old := cur.byName[name]; old == nil || old.parent == "" {
		return "", &apiError{status: fasthttp.StatusNotFound, msg: fmt.Sprintf("The lora adapter '%.256s' cannot be found.", name), vllmType: "NotFoundError"}
	}
	m.cur.Store(cur.without(name))
	return fmt.Sprintf("Success: LoRA adapter '%s' removed successfully.", name), nil
}

// appendCard appends sm's model card as vLLM's ModelCard serializes it:
// id, object, created, owned_by, root, parent (null for a base model),
// max_model_len (null for an adapter: vLLM sets it on base models only)
// and one ModelPermission with vLLM's defaults.
func (m *models) appendCard(b []byte, sm *servedModel, now int64) []byte {
	b = append(b, `{"id":`...)
	b = append(b, sm.quoted...)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, now, 10)
	b = append(b, `,"owned_by":"vllm","root":`...)
	b = append(b, sm.root...)
	b = append(b, `,"parent":`...)
	if sm.parent == "" {
		b = append(b, `null,"max_model_len":`...)
		b = strconv.AppendInt(b, int64(m.maxLen), 10)
	} else {
		b = strconv.AppendQuote(b, sm.parent) // validModel: no escapes needed
		b = append(b, `,"max_model_len":null`...)
	}
	b = append(b, `,"permission":[{"id":"modelperm-`...)
	var id [16]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (Go 1.24+)
	b = hex.AppendEncode(b, id[:])
	b = append(b, `","object":"model_permission","created":`...)
	b = strconv.AppendInt(b, now, 10)
	return append(b, `,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}`...)
}

// appendList appends GET /v1/models: every base model, then every
// adapter.
func (m *models) appendList(b []byte) []byte {
	now := time.Now().Unix()
	b = append(b, `{"object":"list","data":[`...)
	for i, sm := range m.cur.Load().list {
		if i > 0 {
			b = append(b, ',')
		}
		b = m.appendCard(b, sm, now)
	}
	return append(b, `]}`...)
}

// appendLoRAInfo appends vLLM's vllm:lora_requests_info gauge: max_lora,
// and the adapters with requests waiting and running, comma-separated
// (validModel names hold no commas or quotes), valued the current time
// as vLLM's (set_to_current_time). vLLM keeps a series for every label
// set it has seen; the simulator writes the current one only.
func (m *models) appendLoRAInfo(b []byte) []byte {
	var waiting, running []byte
	for _, sm := range m.cur.Load().list {
		if sm.load == nil {
			continue
		}
		if sm.load.waiting.Load() > 0 {
			if len(waiting) > 0 {
				waiting = append(waiting, ',')
			}
			waiting = append(waiting, sm.name...)
		}
		if sm.load.running.Load() > 0 {
			if len(running) > 0 {
				running = append(running, ',')
			}
			running = append(running, sm.name...)
		}
	}
	b = append(b, `vllm:lora_requests_info{max_lora="`...)
	b = strconv.AppendInt(b, int64(m.max), 10)
	b = append(b, `",running_lora_adapters="`...)
	b = append(b, running...)
	b = append(b, `",waiting_lora_adapters="`...)
	b = append(b, waiting...)
	b = append(b, `"} `...)
	b = strconv.AppendFloat(b, float64(time.Now().UnixMilli())/1e3, 'g', -1, 64)
	return append(b, '\n')
}

// models serves GET /v1/models.
func (s *Sim) models(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	ctx.SetBody(s.served.appendList(nil))
}

// modelByID serves GET /v1/models/{id}: the card of a served name, else
// vLLM's 404 for an unknown model (vLLM, as read at its commit 055e47c,
// serves only the list).
func (s *Sim) modelByID(ctx *fasthttp.RequestCtx, id string) {
	sm := s.served.cur.Load().byName[id]
	if sm == nil {
		s.answerError(ctx, modelNotFound(id))
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(s.served.appendCard(nil, sm, time.Now().Unix()))
}

// loraAdapter serves POST /v1/load_lora_adapter (load true) and
// /v1/unload_lora_adapter: 200 with vLLM's plain-text message, or vLLM's
// error. Config.RuntimeLoRA false answers 404 before this.
func (s *Sim) loraAdapter(ctx *fasthttp.RequestCtx, load bool) {
	r, e := decodeLoRARequest(ctx.PostBody(), load)
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	var msg string
	if load {
		msg, e = s.served.load(r.name, r.path, r.inplace)
	} else {
		msg, e = s.served.unload(r.name)
	}
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	if load {
		s.log.Info("loaded LoRA adapter", "lora_name", r.name, "lora_path", r.path)
	} else {
		s.log.Info("removed LoRA adapter", "lora_name", r.name)
	}
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString(msg)
}
