package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/rules"
)

// modelsTimeout bounds Models when ctx has no earlier deadline.
const modelsTimeout = 5 * time.Second

// modelsMaxBytes bounds one backend's /v1/models answer.
const modelsMaxBytes = 4 << 20

// Models GETs /v1/models from every routable backend at once (bounded by
// ctx and 5 s) and returns the union by model id as an OpenAI list
// (`{"object":"list","data":[...]}`), each model object as the first
// backend (by ID) that listed it sent it. No routable backend: an error
// wrapping ErrNoCandidate (an empty list would tell a client the model it
// asks for does not exist; issue 15). Routable backends but none
// answered: an error. The errors name backends as clients see them
// (Config.BackendHeader). Any goroutine but an event loop (it waits).
func (s *Set) Models(ctx context.Context) ([]byte, error) {
	var bs []*Backend
	for _, b := range s.Snapshot() {
		if b.Routable() {
			bs = append(bs, b)
		}
	}
	if len(bs) == 0 {
		return nil, fmt.Errorf("%w: every backend is down, draining or removed", ErrNoCandidate)
	}
	deadline := time.Now().Add(modelsTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	bodies := make([][]byte, len(bs))
	errs := make([]error, len(bs))
	g := rules.NewGroup(ctx)
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Add(1)
		g.Go("backend-models", func(context.Context) {
			defer wg.Done()
			bodies[i], errs[i] = getModels(b, s.label(b), deadline)
		})
	}
	wg.Wait()
	g.Stop()

	var p fastjson.Parser
	seen := make(map[string]bool)
	out := []byte(`{"object":"list","data":[`)
	n, answered := 0, 0
	for i, body := range bodies {
		if errs[i] != nil {
			continue
		}
		v, err := p.ParseBytes(body)
		if err != nil {
			errs[i] = fmt.Errorf("backend %s: bad /v1/models JSON: %w", s.label(bs[i]), err)
			continue
		}
		answered++
		for _, m := range v.GetArray("data") {
			id := string(m.GetStringBytes("id"))
			if id == "" || seen[id] {
				continue
			}
			seen[id] = true
			if n > 0 {
				out = append(out, ',')
			}
			out = m.MarshalTo(out)
			n++
		}
	}
	if answered == 0 {
		return nil, fmt.Errorf("backend: no backend answered /v1/models: %w", errors.Join(errs...))
	}
	return append(out, "]}"...), nil
}

// FetchModels GETs b's /v1/models (at most 4 MiB) by the deadline: the
// fleet's refresh (upstream/fleet). A status other than 200 is a
// *StatusError. Its errors name b as clients see it. Any goroutine but an
// event loop (it waits).
func (s *Set) FetchModels(b *Backend, deadline time.Time) ([]byte, error) {
	return getModels(b, s.label(b), deadline)
}

// StatusError is a control request's answer that was not 200.
type StatusError struct {
	Code int
	Body []byte // at most controlMaxBytes of it
}

func (e *StatusError) Error() string { return fmt.Sprintf("status %d", e.Code) }

// controlMaxBytes bounds the answer Control reads.
const controlMaxBytes = 64 << 10

// Control POSTs body (JSON) to path on b by the deadline and returns the
// answer's status and body (at most 64 KiB): the adapter load and unload
// the router forwards (shard). A transport failure is an error naming b
// as clients see it. Any goroutine but an event loop (it waits).
func (s *Set) Control(b *Backend, path string, body []byte, deadline time.Time) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(path)
	b.ctlScheme(req)
	req.Header.SetHost(b.host)
	req.Header.SetContentType("application/json")
	req.SetBody(body)
	if err := b.ctl.DoDeadline(req, resp, deadline); err != nil {
		return 0, nil, fmt.Errorf("backend %s: %s: %s", s.label(b), path, failReason(err))
	}
	defer resp.CloseBodyStream() //nolint:errcheck // only decides whether the connection is reused
	var out []byte
	if bs := resp.BodyStream(); bs != nil {
		var err error
		out, err = io.ReadAll(io.LimitReader(bs, controlMaxBytes))
		if err != nil {
			return 0, nil, fmt.Errorf("backend %s: %s: %w", s.label(b), path, err)
		}
	}
	return resp.StatusCode(), out, nil
}

// getModels GETs b's /v1/models; its errors name b by label.
func getModels(b *Backend, label string, deadline time.Time) ([]byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI("/v1/models")
	b.ctlScheme(req)
	req.Header.SetHost(b.host)
	if err := b.ctl.DoDeadline(req, resp, deadline); err != nil {
		// The reason in words: err names the address.
		return nil, fmt.Errorf("backend %s: /v1/models: %s", label, failReason(err))
	}
	defer resp.CloseBodyStream() //nolint:errcheck // only decides whether the connection is reused
	if code := resp.StatusCode(); code != fasthttp.StatusOK {
		return nil, fmt.Errorf("backend %s: /v1/models: %w", label, &StatusError{Code: code})
	}
	bs := resp.BodyStream()
	if bs == nil {
		return nil, fmt.Errorf("backend %s: /v1/models: empty body", label)
	}
	body, err := io.ReadAll(io.LimitReader(bs, modelsMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("backend %s: /v1/models: %w", label, err)
	}
	if len(body) > modelsMaxBytes {
		return nil, fmt.Errorf("backend %s: /v1/models: body over %d bytes", label, modelsMaxBytes)
	}
	return body, nil
}
