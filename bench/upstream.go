package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/saltus-lb/saltus/rules"
)

// Upstream is an instant OpenAI-compatible engine for measuring the
// router itself: every completion is answered at once with a fixed small
// body (SSE when the request asks for "stream": true).
type Upstream struct {
	Addr string // host:port
	srv  *fasthttp.Server
	ln   net.Listener
	g    *rules.Group
}

// The instant engine's answers carry usage without
// prompt_tokens_details.cached_tokens, as vLLM's do by default (it reports
// them only with --enable-prompt-tokens-details), streamed or not: a
// claim of 0 cached tokens for the prompt every request repeats would
// contradict the router's prediction on every answer, and make it demote
// the holder each time (shard/feedback.go): a test of routing on a lying
// engine, not of the transport this engine measures.
var (
	instantJSON = []byte(`{"id":"cmpl-bench","object":"chat.completion","model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":1,"total_tokens":1001}}`)
	instantSSE  = []byte("data: {\"id\":\"cmpl-bench\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n" +
		"data: {\"id\":\"cmpl-bench\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":1}}\n\n" +
		"data: [DONE]\n\n")
	sseEvent   = []byte("data: {\"id\":\"cmpl-bench\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n")
	sseTail    = []byte("data: {\"id\":\"cmpl-bench\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":16}}\n\ndata: [DONE]\n\n")
	modelsJSON = []byte(`{"object":"list","data":[{"id":"bench","object":"model","owned_by":"saltus-bench"}]}`)
)

// StartUpstream starts an instant engine on addr ("127.0.0.1:0" picks a
// port).
func StartUpstream(addr string) (*Upstream, error) { return StartUpstreamEvents(addr, 0) }

// StartUpstreamEvents is StartUpstream whose streamed answers, with
// events > 0, are that many content events, each written and flushed on
// its own (one chunk each, as an engine sends a token), then the usage
// event and [DONE]; 0 sends the three events of instantSSE in one body.
func StartUpstreamEvents(addr string, events int) (*Upstream, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	u := &Upstream{Addr: ln.Addr().String(), ln: ln, g: rules.NewGroup(context.Background())}
	// A short idle-worker sweep lets Close's goroutines end soon after
	// Shutdown (the sweeper sleeps this long between looks).
	h := handleInstant
	if events > 0 {
		h = func(ctx *fasthttp.RequestCtx) {
			if ctx.IsPost() && streamRequested(ctx.PostBody()) {
				ctx.SetContentType("text/event-stream")
				ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
					for range events {
						_, _ = w.Write(sseEvent) // a failed write shows in the Flush below
						if w.Flush() != nil {
							return
						}
					}
					_, _ = w.Write(sseTail) // the client left: nothing to tell it
				})
				return
			}
			handleInstant(ctx)
		}
	}
	u.srv = &fasthttp.Server{Handler: h, Name: "saltus-bench-upstream", MaxIdleWorkerDuration: 100 * time.Millisecond}
	u.g.Go("bench.upstream", func(context.Context) { _ = u.srv.Serve(ln) }) // returns when Close shuts it down
	return u, nil
}

func handleInstant(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	switch {
	case path == "/health":
		ctx.SetBodyString("ok")
	case path == "/v1/models":
		ctx.SetContentType("application/json")
		ctx.SetBody(modelsJSON)
	case ctx.IsPost() && strings.HasPrefix(path, "/v1/"):
		if streamRequested(ctx.PostBody()) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBody(instantSSE)
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(instantJSON)
	default:
		ctx.SetStatusCode(fasthttp.StatusNotFound)
	}
}

// streamRequested is a cheap look for "stream": true (the bench's own
// bodies; not a JSON parser). It allocates nothing: the upstream must cost
// as little as possible, it shares the machine with what it measures.
func streamRequested(body []byte) bool {
	i := bytes.Index(body, []byte(`"stream"`))
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(body[i+len(`"stream"`):], " \t\r\n:")
	return bytes.HasPrefix(rest, []byte("true"))
}

// Close stops the engine and waits for its server goroutine.
func (u *Upstream) Close(ctx context.Context) error {
	err := u.srv.Shutdown()
	u.g.Stop()
	return errors.Join(err, u.g.Wait(ctx))
}
