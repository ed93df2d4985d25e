package shard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/reactor"
	"github.com/saltus-lb/saltus/rules"
	"github.com/saltus-lb/saltus/upstream/backend"
)

// LoRA adapters at run time (issue 29): POST /v1/load_lora_adapter and
// /v1/unload_lora_adapter, as vLLM serves them with
// VLLM_ALLOW_RUNTIME_LORA_UPDATING, are answered by saltus for the
// fleet. A load goes to the engines of the adapter's base model's pool
// (all of them, or the Config.AdapterEngines least loaded), an unload to
// every engine that lists the adapter; then their models are fetched
// again, so the adapter is routable (or gone) when the answer comes.
// They run on one goroutine off the loops, one at a time, from a bounded
// queue.

// Bounds of the adapter operations.
const (
	adaptersQueue   = 16               // waiting operations; over it 503
	adapterTimeout  = 2 * time.Minute  // one engine's load (vLLM may download the adapter first)
	adapterRefresh  = 10 * time.Second // the models fetched again afterwards
	adapterMaxBytes = 64 << 10         // an operation's body
)

// SetAdminToken sets the bearer token the adapter endpoints require (""
// none: open, as vLLM's are with run-time updating on). The data plane
// sets the admin listener's token, at start and on reload. Any goroutine.
func (r *Router) SetAdminToken(tok string) { r.adminToken.Store(&tok) }

// adapterOp is one load or unload as a client asked it.
type adapterOp struct {
	load    bool
	inplace bool   // load_inplace: reload the weights where it is loaded too
	name    string // lora_name
	base    string // base_model (saltus's field), "" none
	body    []byte // what is forwarded: the client's body less base_model
}

func (op adapterOp) verb() string {
	if op.load {
		return "load"
	}
	return "unload"
}

// adapterWorker runs the adapter operations off the loops.
func (r *Router) adapterWorker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case x := <-r.adapters:
					r.fail(x, routeAdapters, &openai.Error{Status: 503, Type: "server_error", Code: "shutting_down",
						Message: "the router is shutting down"})
				default:
					return
				}
			}
		case x := <-r.adapters:
			r.adapter(ctx, x)
		}
	}
}

// adapter serves one operation. On the adapter worker.
func (r *Router) adapter(ctx context.Context, x exchange) {
	req := x.Request()
	if gone(x) {
		r.m.clientGone.Inc() // left while queued: nothing is sent
		return
	}
	if !r.cfg.AdapterUpdates {
		r.fail(x, routeAdapters, &openai.Error{Status: 404, Type: "invalid_request_error", Code: "not_found",
			Message: fmt.Sprintf("%s is off on this router (--adapter-updates=false)", req.Path)})
		return
	}
	if tok := r.adminToken.Load(); tok != nil && *tok != "" && !bearerMatches(req.HeaderValue("Authorization"), *tok) {
		r.fail(x, routeAdapters, &openai.Error{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: "adapter loads and unloads need the router's admin token: Authorization: Bearer <--admin-token>"},
			reactor.Header{Name: "WWW-Authenticate", Value: `Bearer realm="saltus-admin"`})
		return
	}
	op, e := parseAdapterOp(req.Path == "/v1/load_lora_adapter", req.Body)
	if e != nil {
		r.fail(x, routeAdapters, e)
		return
	}
	if r.fleet == nil {
		r.fail(x, routeAdapters, &openai.Error{Status: 503, Type: "server_error", Code: "no_backend",
			Message: "this router does not track the engines' models"})
		return
	}
	targets, base, done, e := r.adapterTargets(op)
	if e != nil {
		r.fail(x, routeAdapters, e)
		return
	}
	results := r.forwardAdapter(ctx, op, targets)
	ids := make([]int, len(targets))
	for i, b := range targets {
		ids[i] = b.ID
	}
	if len(ids) > 0 {
		c, cancel := context.WithTimeout(ctx, adapterRefresh)
		// A refresh cut short leaves the next round to find the adapter.
		_ = r.fleet.Refresh(c, ids...)
		cancel()
	}
	r.answerAdapter(x, op, base, append(done, results...))
}

// routable reports whether b is routable (the Router's view: tests fake
// it). Any goroutine.
func (r *Router) routable(b *backend.Backend) bool {
	_, ok := r.state(b)
	return ok
}

// bearerMatches reports whether an Authorization header carries the
// bearer token want (the scheme in any case, RFC 9110). Both are hashed
// first, so that the comparison takes the same time whatever the
// tokens' lengths, as the admin listener's does.
func bearerMatches(header, want string) bool {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got, exp := sha256.Sum256([]byte(strings.TrimSpace(tok))), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(got[:], exp[:]) == 1
}

// parseAdapterOp reads vLLM's LoadLoRAAdapterRequest (lora_name,
// lora_path, and whatever else the engines take, passed on) or
// UnloadLoRAAdapterRequest (lora_name), plus saltus's base_model, which
// names the pool a load goes to and is not forwarded.
func parseAdapterOp(load bool, body []byte) (adapterOp, *openai.Error) {
	op := adapterOp{load: load}
	if len(body) > adapterMaxBytes {
		return op, &openai.Error{Status: 413, Type: "invalid_request_error", Code: "request_too_large",
			Message: fmt.Sprintf("an adapter %s body is at most %d bytes", op.verb(), adapterMaxBytes)}
	}
	var p fastjson.Parser // off the loops, one per operation
	v, err := p.ParseBytes(body)
	if err != nil {
		return op, openai.BadRequest("", "invalid JSON: %v", err)
	}
	if v.Type() != fastjson.TypeObject {
		return op, openai.BadRequest("", "request body must be a JSON object, got %s", v.Type())
	}
	str := func(field string, required bool) (string, *openai.Error) {
		f := v.Get(field)
		if f == nil || f.Type() == fastjson.TypeNull {
			if required {
				return "", openai.BadRequest(field, "%s: missing", field)
			}
			return "", nil
		}
		if f.Type() != fastjson.TypeString || len(f.GetStringBytes()) == 0 {
			return "", openai.BadRequest(field, "%s: want a non-empty string", field)
		}
		return string(f.GetStringBytes()), nil
	}
	var e *openai.Error
	if op.name, e = str("lora_name", true); e != nil {
		return op, e
	}
	if load {
		if _, e = str("lora_path", true); e != nil {
			return op, e
		}
	}
	if op.base, e = str("base_model", false); e != nil {
		return op, e
	}
	if f := v.Get("load_inplace"); f != nil && f.Type() == fastjson.TypeTrue {
		op.inplace = true
	}
	v.Del("base_model")
	op.body = v.MarshalTo(nil)
	return op, nil
}

// adapterResult is one engine's answer to an operation.
type adapterResult struct {
	Backend string `json:"backend"`
	Status  int    `json:"status"` // the engine's; 0: it did not answer
	Message string `json:"message"`
	id      int
}

// adapterTargets chooses the engines an operation goes to, and reports
// those that need nothing (done: a load where the adapter is already
// listed). A load: the routable backends of the base model's pool that
// do not list the adapter, all of them or up to Config.AdapterEngines
// (counting those that have it) by fewest requests in flight. An
// unload: every routable backend that lists it.
func (r *Router) adapterTargets(op adapterOp) (targets []*backend.Backend, base string, done []adapterResult, _ *openai.Error) {
	ix := r.fleet.Index()
	snap := r.up.Snapshot()
	listed := func(id int) bool {
		bm, ok := ix.Backend(id)
		return ok && slices.Contains(bm.Models, op.name)
	}
	if !op.load {
		for _, b := range snap {
			if listed(b.ID) && r.routable(b) {
				targets = append(targets, b)
			}
		}
		if len(targets) == 0 {
			return nil, "", nil, &openai.Error{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "lora_name",
				Message: fmt.Sprintf("The lora adapter '%.200s' cannot be found on any routable backend.", op.name)}
		}
		return targets, "", nil, nil
	}
	base = op.base
	if base == "" {
		if p := ix.Lookup(op.name); p != nil && p.Model.Parent != "" {
			base = p.Model.Parent // loaded somewhere already: its base
		}
	}
	if base == "" {
		var bases []string
		for _, p := range ix.Pools() {
			if p.Model.Parent == "" {
				bases = append(bases, p.Model.ID)
			}
		}
		switch len(bases) {
		case 0:
			return nil, "", nil, &openai.Error{Status: 503, Type: "server_error", Code: "no_backend",
				Message: "no backend has listed its models yet; retry later, or name the pool with \"base_model\""}
		case 1:
			base = bases[0]
		default:
			return nil, "", nil, openai.BadRequest("base_model", "the fleet serves several base models (%s): name the adapter's with \"base_model\"", strings.Join(bases, ", "))
		}
	}
	p := ix.Lookup(base)
	if p == nil {
		e := modelNotFound(base)
		e.Param = "base_model"
		return nil, "", nil, e
	}
	var have, lack []*backend.Backend
	for _, b := range snap {
		if !p.Has(b.ID) || !r.routable(b) {
			continue
		}
		if listed(b.ID) {
			have = append(have, b)
		} else {
			lack = append(lack, b)
		}
	}
	if len(have)+len(lack) == 0 {
		return nil, "", nil, &openai.Error{Status: 503, Type: "server_error", Code: "no_backend",
			Message: fmt.Sprintf("no backend serving the model `%.200s` is available; retry later", base)}
	}
	if op.inplace {
		// New weights under the same name: every engine that has it
		// reloads them, the others load them.
		lack, have = append(have, lack...), nil
	}
	for _, b := range have {
		done = append(done, adapterResult{Backend: r.up.Label(b), Status: 200, Message: "already loaded", id: b.ID})
	}
	if n := r.cfg.AdapterEngines; n > 0 {
		slices.SortStableFunc(lack, func(a, b *backend.Backend) int { return int(a.InFlight() - b.InFlight()) })
		lack = lack[:max(0, min(len(lack), n-len(have)))]
	}
	return lack, base, done, nil
}

// forwardAdapter sends op to every target at once and collects their
// answers.
func (r *Router) forwardAdapter(ctx context.Context, op adapterOp, targets []*backend.Backend) []adapterResult {
	out := make([]adapterResult, len(targets))
	if len(targets) == 0 {
		return out
	}
	deadline := time.Now().Add(adapterTimeout)
	g := rules.NewGroup(ctx)
	var wg sync.WaitGroup
	for i, b := range targets {
		wg.Add(1)
		g.Go("shard.adapter", func(context.Context) {
			defer wg.Done()
			res := adapterResult{Backend: r.up.Label(b), id: b.ID}
			status, body, err := r.up.Control(b, "/v1/"+op.verb()+"_lora_adapter", op.body, deadline)
			if err != nil {
				res.Message = err.Error()
			} else {
				res.Status, res.Message = status, openai.ErrorMessage(body)
			}
			out[i] = res
		})
	}
	all := make(chan struct{})
	g.Go("shard.adapter-wait", func(context.Context) { wg.Wait(); close(all) })
	select {
	case <-all:
	case <-ctx.Done():
		// Shutting down: answer now; the forwards end when the backend
		// set closes their connections (Set.Close), right after.
		// (out is still theirs: a fresh answer, not read from it.)
		cut := make([]adapterResult, len(targets))
		for i, b := range targets {
			cut[i] = adapterResult{Backend: r.up.Label(b), Message: "the router is shutting down", id: b.ID}
		}
		g.Stop()
		return cut
	}
	g.Stop()
	_ = g.Wait(context.Background()) // every forward returned: Wait returns at once
	for _, res := range out {
		if res.Status == 200 {
			r.m.adapterOps[opIndex(op)][0].Inc()
		} else {
			r.m.adapterOps[opIndex(op)][1].Inc()
		}
	}
	return out
}

func opIndex(op adapterOp) int {
	if op.load {
		return 0
	}
	return 1
}

// answerAdapter answers an operation from its engines' results: 200 when
// every engine has the adapter loaded (or unloaded), 207 when some do,
// else the engines' own status when they all gave the same client error,
// or 502.
func (r *Router) answerAdapter(x exchange, op adapterOp, base string, results []adapterResult) {
	ok := 0
	for _, res := range results {
		if res.Status == 200 {
			ok++
		}
	}
	if ok == 0 {
		status := results[0].Status
		var why []string
		for _, res := range results {
			if res.Status != status || status < 400 || status >= 500 {
				status = 502
			}
			why = append(why, res.Backend+": "+res.Message)
		}
		code := "bad_gateway"
		if status != 502 {
			code = ""
		}
		r.fail(x, routeAdapters, &openai.Error{Status: status, Code: code, Param: "lora_name",
			Message: fmt.Sprintf("cannot %s the lora adapter '%.200s' on any of %d backends: %s", op.verb(), op.name, len(results), strings.Join(why, "; "))})
		return
	}
	status := 200
	if ok < len(results) {
		status = 207
	}
	body, err := json.Marshal(struct {
		Object    string          `json:"object"`
		LoRAName  string          `json:"lora_name"`
		BaseModel string          `json:"base_model,omitempty"`
		Message   string          `json:"message"`
		Backends  []adapterResult `json:"backends"`
	}{"lora_adapter." + op.verb(), op.name, base,
		fmt.Sprintf("Success: LoRA adapter '%s' %s on %d of %d backends.", op.name, map[bool]string{true: "loaded", false: "unloaded"}[op.load], ok, len(results)),
		results})
	if err != nil {
		panic("BUG: cannot encode an adapter answer: " + err.Error())
	}
	r.m.request(routeAdapters, status) // counted first, as fail does
	hdr := []reactor.Header{{Name: "Content-Type", Value: "application/json"},
		{Name: reactor.RequestIDHeader, Value: x.Request().RequestID()}}
	x.Respond(status, hdr, body)
	r.logOwn(x, status, hdr, body)
}
