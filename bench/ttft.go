package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/valyala/fastjson"
)

// Outcome is what the benchmark client saw of one streamed completion.
type Outcome struct {
	Status int
	// TTFT is the time from sending the request to the first SSE event
	// that carries content (a non-empty delta or text); Latency to the end
	// of the stream.
	TTFT, Latency time.Duration
	// Usage as the engine reported it in its final chunk
	// (stream_options.include_usage); -1 when it sent none.
	PromptTokens, CompletionTokens, CachedTokens int
	// Backend is saltus's X-Saltus-Backend header, if any; Route its
	// X-Saltus-Route ("matched/total reason …": the blocks the router
	// predicted the engine holds).
	Backend, Route string
	// RetryAfter: the answer carried a Retry-After header.
	RetryAfter bool
	// Text is the assistant's content, concatenated (multi-turn workloads
	// append it to the history).
	Text string
	// Incomplete: the stream ended without `data: [DONE]`, or had an
	// `event: error`.
	Incomplete bool
	Err        error
}

// maxStreamBytes bounds what one answer may send the client; a longer
// stream is cut and counted as an error.
const maxStreamBytes = 16 << 20

// Client sends streamed chat or completion requests and times them.
type Client struct {
	HTTP *http.Client
}

// NewClient returns a client keeping up to conns idle connections per
// host (one per simulated user is enough), with no overall timeout: the
// caller's context bounds each request.
func NewClient(conns int) *Client {
	tr := &http.Transport{
		MaxIdleConns:        conns * 4,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &Client{HTTP: &http.Client{Transport: tr}}
}

// Close drops the idle connections.
func (c *Client) Close() { c.HTTP.CloseIdleConnections() }

// Do posts body (a JSON request with "stream": true) to url and reads the
// SSE answer to its end. A non-2xx answer is an error with its status.
func (c *Client) Do(ctx context.Context, url string, body []byte) Outcome {
	return c.DoAs(ctx, url, body, "")
}

// DoAs is Do with "Authorization: Bearer key" when key is not empty.
func (c *Client) DoAs(ctx context.Context, url string, body []byte, key string) Outcome {
	o := Outcome{PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		o.Err = err
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := c.HTTP.Do(req)
	if err != nil {
		o.Err = err
		o.Latency = time.Since(start)
		return o
	}
	defer resp.Body.Close()
	o.Status = resp.StatusCode
	o.Backend = resp.Header.Get("X-Saltus-Backend")
	o.Route = resp.Header.Get("X-Saltus-Route")
	o.RetryAfter = resp.Header.Get("Retry-After") != ""
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		o.Err = fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
		o.Latency = time.Since(start)
		return o
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		o.Err = fmt.Errorf("want an SSE answer, got Content-Type %q", resp.Header.Get("Content-Type"))
		o.Latency = time.Since(start)
		return o
	}
	o.Err = readStream(io.LimitReader(resp.Body, maxStreamBytes+1), start, &o)
	o.Latency = time.Since(start)
	return o
}

// maxModelsBytes bounds a GET /v1/models answer (vLLM lists its served
// names and loaded adapters: a few hundred bytes each).
const maxModelsBytes = 4 << 20

// Models returns the names engine (a base URL) lists on GET /v1/models.
func (c *Client) Models(ctx context.Context, engine string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, engine+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot list the models of %s: %w", engine, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxModelsBytes))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("cannot list the models of %s: status %d, %v", engine, resp.StatusCode, err)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("cannot read the models of %s: %w", engine, err)
	}
	names := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		names = append(names, m.ID)
	}
	return names, nil
}

// readStream parses SSE events until [DONE] or EOF, filling o.
func readStream(r io.Reader, start time.Time, o *Outcome) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		text  strings.Builder
		data  []byte
		event string
		p     fastjson.Parser
		read  int
		done  bool
	)
	o.Incomplete = true
	for {
		line, err := br.ReadSlice('\n')
		read += len(line)
		if errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Errorf("SSE line longer than %d bytes", br.Size())
		}
		if read > maxStreamBytes {
			return fmt.Errorf("stream longer than %d bytes", maxStreamBytes)
		}
		trimmed := bytes.TrimRight(line, "\r\n")
		switch {
		case len(trimmed) == 0 && (len(data) > 0 || event != ""):
			// End of an event.
			if event == "error" {
				o.Text = text.String()
				return fmt.Errorf("stream error event: %s", data)
			}
			if bytes.Equal(data, []byte("[DONE]")) {
				done = true
			} else if len(data) > 0 {
				if err := onChunk(&p, data, start, o, &text); err != nil {
					o.Text = text.String()
					return err
				}
			}
			data, event = data[:0], ""
		case bytes.HasPrefix(trimmed, []byte("data:")):
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(trimmed[5:], []byte(" "))...)
		case bytes.HasPrefix(trimmed, []byte("event:")):
			event = string(bytes.TrimSpace(trimmed[6:]))
		}
		if err != nil {
			o.Text = text.String()
			if err == io.EOF {
				o.Incomplete = !done
				if !done {
					return errors.New("stream ended without [DONE]")
				}
				return nil
			}
			return err
		}
	}
}

// onChunk reads one chat.completion.chunk or text_completion chunk.
func onChunk(p *fastjson.Parser, data []byte, start time.Time, o *Outcome, text *strings.Builder) error {
	v, err := p.ParseBytes(data)
	if err != nil {
		return fmt.Errorf("bad SSE data: %w", err)
	}
	for _, ch := range v.GetArray("choices") {
		var piece []byte
		if d := ch.Get("delta"); d != nil {
			piece = d.GetStringBytes("content")
		} else {
			piece = ch.GetStringBytes("text")
		}
		if len(piece) > 0 {
			if o.TTFT == 0 {
				o.TTFT = time.Since(start)
			}
			text.Write(piece)
		}
	}
	if u := v.Get("usage"); u != nil && u.Type() == fastjson.TypeObject {
		o.PromptTokens = u.GetInt("prompt_tokens")
		o.CompletionTokens = u.GetInt("completion_tokens")
		o.CachedTokens = 0
		if d := u.Get("prompt_tokens_details"); d != nil && d.Type() == fastjson.TypeObject {
			o.CachedTokens = d.GetInt("cached_tokens")
		}
	}
	return nil
}
