package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// respEngine is a test engine with vLLM's Responses store: each answer's
// id is kept in its own memory, and a request naming an id it does not
// hold is a 404, as vLLM answers it.
type respEngine struct {
	*upstream
	mu     sync.Mutex
	stored map[string]bool
	n      int
}

func newRespEngine(t *testing.T, name string) *respEngine {
	t.Helper()
	e := &respEngine{upstream: &upstream{name: name, done: make(chan struct{})}, stored: map[string]bool{}}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.srv.Close)
	t.Cleanup(func() { close(e.done) })
	return e
}

func (e *respEngine) has(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stored[id]
}

func (e *respEngine) notFound(w http.ResponseWriter, id string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(404)
	fmt.Fprintf(w, `{"error":{"message":"Response with id '%s' not found.","type":"invalid_request_error","code":404}}`, id)
}

func (e *respEngine) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Upstream", e.name)
	switch {
	case r.URL.Path == "/health":
		io.WriteString(w, "ok")
		return
	case r.URL.Path == "/v1/models":
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"llama3","object":"model","created":1,"owned_by":"vllm"},{"id":"only-%s","object":"model","created":2,"owned_by":"vllm"}]}`, e.name)
		return
	case r.URL.Path == "/v1/responses" && r.Method == "POST":
	case strings.HasPrefix(r.URL.Path, "/v1/responses/"):
		id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/responses/"), "/")
		if !e.has(id) {
			e.notFound(w, id)
			return
		}
		if r.Method == "DELETE" {
			e.mu.Lock()
			delete(e.stored, id)
			e.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"object":"response","served_by":%q}`, id, e.name)
		return
	default:
		http.NotFound(w, r)
		return
	}
	e.calls.Add(1)
	var req struct {
		Stream bool   `json:"stream"`
		Prev   string `json:"previous_response_id"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &req) // the router checked it
	if req.Prev != "" && !e.has(req.Prev) {
		e.notFound(w, req.Prev)
		return
	}
	e.mu.Lock()
	e.n++
	id := fmt.Sprintf("resp_%s%d", e.name, e.n)
	e.stored[id] = true
	e.mu.Unlock()
	obj := fmt.Sprintf(`{"id":%q,"object":"response","status":"completed","served_by":%q,"output":[{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}]}`, id, e.name)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, obj)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "event: response.created\ndata: {\"response\":{\"id\":%q,\"status\":\"in_progress\"},\"sequence_number\":0,\"type\":\"response.created\"}\n\n", id)
	w.(http.Flusher).Flush()
	fmt.Fprintf(w, "event: response.completed\ndata: {\"response\":%s,\"sequence_number\":1,\"type\":\"response.completed\"}\n\n", obj)
}

func responsesJSON(stream bool, instructions, input, prev string) string {
	m := map[string]any{"model": "llama3", "stream": stream, "instructions": instructions,
		"input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": input}}}}}
	if prev != "" {
		m["previous_response_id"] = prev
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// answerID is the id of a Responses answer: the JSON's, or the
// response.created event's.
func answerID(t *testing.T, a answer) string {
	t.Helper()
	body := a.body
	if strings.HasPrefix(a.header.Get("Content-Type"), "text/event-stream") {
		ev, _, _ := strings.Cut(body, "\n\n")
		_, data, ok := strings.Cut(ev, "data: ")
		if !ok {
			t.Fatalf("no data in the first event: %q", body)
		}
		var created struct {
			Response struct{ ID string } `json:"response"`
		}
		if err := json.Unmarshal([]byte(data), &created); err != nil || created.Response.ID == "" {
			t.Fatalf("first event %q: %v", data, err)
		}
		return created.Response.ID
	}
	var v struct{ ID string }
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.ID == "" {
		t.Fatalf("answer %q: %v", body, err)
	}
	return v.ID
}

// TestServeResponses: the Responses API through the real serving path.
// A request is routed by its rendered prefix and sticks; a request naming
// a response (previous_response_id, GET/DELETE/cancel by id) goes to the
// engine that holds it, streamed or not, on both upstream paths.
func TestServeResponses(t *testing.T) {
	for _, mode := range []string{"loop"} {
		t.Run(mode, func(t *testing.T) {
			engines := []*respEngine{newRespEngine(t, "a"), newRespEngine(t, "b"), newRespEngine(t, "c")}
			ups := []*upstream{engines[0].upstream, engines[1].upstream, engines[2].upstream}
			byURL := map[string]*respEngine{}
			for _, e := range engines {
				byURL[e.srv.URL] = e
			}
			s := startServeWith(t, ups, func(c *serveConfig) { c.UpstreamIO = mode })
			base := "http://" + s.addr
			send := func(body string) answer {
				t.Helper()
				a := do(t, "POST", base+"/v1/responses", body)
				if a.status != 200 {
					t.Fatalf("POST /v1/responses: %d %s", a.status, a.body)
				}
				return a
			}

			// Routed by prefix: first a hash, then the tree, same backend.
			first := send(responsesJSON(false, sysA, "Where is the Maersk Alabama?", ""))
			if _, total, reason := parseRoute(t, first.route); reason != "hash" || total < 8 {
				t.Fatalf("first: route %q", first.route)
			}
			again := send(responsesJSON(false, sysA, "Which port code is Rotterdam?", ""))
			if m, _, reason := parseRoute(t, again.route); reason != "tree" || m < 8 || again.backend != first.backend {
				t.Fatalf("again: route %q on %s, first on %s", again.route, again.backend, first.backend)
			}

			// previous_response_id: to the holder, whatever the prefix says.
			for _, stream := range []bool{false, true} {
				for i := range 4 {
					seed := send(responsesJSON(stream, sysB+fmt.Sprint(i), "A haiku, please", ""))
					id := answerID(t, seed)
					if e := byURL[seed.backend]; e == nil || !e.has(id) {
						t.Fatalf("%s not held by %s", id, seed.backend)
					}
					next := send(responsesJSON(stream, sysA, "And another", id))
					if _, _, reason := parseRoute(t, next.route); reason != "response_id" || next.backend != seed.backend {
						t.Fatalf("stream %v: follow-up of %s: route %q on %s, want %s", stream, id, next.route, next.backend, seed.backend)
					}
					answerID(t, next)
				}
			}

			// GET, cancel and DELETE by id go to the holder; unknown ids to
			// the least loaded (the engine answers 404).
			id := answerID(t, first)
			for _, m := range []struct{ method, path string }{
				{"GET", "/v1/responses/" + id},
				{"GET", "/v1/responses/" + id + "/input_items"},
				{"POST", "/v1/responses/" + id + "/cancel"},
				{"DELETE", "/v1/responses/" + id},
			} {
				a := do(t, m.method, base+m.path, "")
				if a.status != 200 || a.backend != first.backend || !strings.HasSuffix(a.route, " response_id") {
					t.Fatalf("%s %s: %d on %s (route %q), want %s: %s", m.method, m.path, a.status, a.backend, a.route, first.backend, a.body)
				}
			}
			if byURL[first.backend].has(id) {
				t.Fatal("DELETE did not reach the holder")
			}
			if a := do(t, "GET", base+"/v1/responses/resp_nobody", ""); a.status != 404 || a.route != "0/0 fallback" {
				t.Fatalf("unknown id: %d %q %s", a.status, a.route, a.body)
			}
			if a := do(t, "PUT", base+"/v1/responses/"+id, ""); a.status != 405 || a.header.Get("Allow") != "GET, DELETE" {
				t.Fatalf("PUT: %d %q", a.status, a.header.Get("Allow"))
			}
			// An unknown previous_response_id is routed by prefix.
			if a := do(t, "POST", base+"/v1/responses", responsesJSON(false, sysA, "x", "resp_gone")); a.status != 404 || routeReason(a.route) != "tree" {
				t.Fatalf("unknown previous id: %d %q %s", a.status, a.route, a.body)
			}
			// A bad request names the field.
			if a := do(t, "POST", base+"/v1/responses", `{"model":"llama3","input":[{"role":"user","content":5}]}`); a.status != 400 || errParam(a.body) != "input[0].content" {
				t.Fatalf("bad input: %d %s", a.status, a.body)
			}

			if hits := s.metric(t, `saltus_responses_id_lookups_total{result="hit"}`); hits != 12 {
				t.Errorf("hits %v, want 12", hits)
			}
			if unknown := s.metric(t, `saltus_responses_id_lookups_total{result="unknown"}`); unknown != 2 {
				t.Errorf("unknown %v, want 2", unknown)
			}
			if n := s.metric(t, "saltus_responses_ids"); n != 18 {
				t.Errorf("saltus_responses_ids %v, want 18 (2 routed, 8 seeds, 8 follow-ups)", n)
			}
		})
	}
}

// TestServeModelsRetrieve: GET /v1/models/{id} answers the model object
// (models.retrieve), or OpenAI's 404.
func TestServeModelsRetrieve(t *testing.T) {
	e := newRespEngine(t, "a")
	s := startServe(t, []*upstream{e.upstream, newRespEngine(t, "b").upstream})
	a := do(t, "GET", "http://"+s+"/v1/models/only-b", "")
	var m struct {
		ID, Object, OwnedBy string
		Created             int64
	}
	if err := json.Unmarshal([]byte(a.body), &m); a.status != 200 || err != nil || m.ID != "only-b" || m.Object != "model" || m.Created != 2 {
		t.Fatalf("retrieve: %d %v %s", a.status, err, a.body)
	}
	a = do(t, "GET", "http://"+s+"/v1/models/nope", "")
	if er := errorOf(t, a.body); a.status != 404 || er.Error.Code != "model_not_found" || errParam(a.body) != "model" {
		t.Fatalf("unknown model: %d %s", a.status, a.body)
	}
}

// errParam is the error.param of an OpenAI error body.
func errParam(body string) string {
	var e struct {
		Error struct{ Param string } `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &e) // a missing param fails the caller's check
	return e.Error.Param
}
