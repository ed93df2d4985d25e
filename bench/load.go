package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/saltus-lb/saltus/rules"
)

// LoadConfig is a closed-loop HTTP/1.1 load: Conns keep-alive connections
// each sending Request and reading the answer, again and again, until
// Duration passes or Requests answers arrived (0: no count limit).
type LoadConfig struct {
	Target   string // host:port
	Conns    int
	Duration time.Duration
	Requests int
	// Request is the raw request, sent as is (keep-alive).
	Request []byte
	// TLS, when not nil, makes every connection a TLS client with it
	// (one handshake per connection; keep-alive after).
	TLS *tls.Config
}

// LoadResult is what a load run measured.
type LoadResult struct {
	Requests int     // answers read (any status)
	Non2xx   int     // answers with a status outside 2xx
	Errors   int     // connection errors (each ends its connection; it is redialled)
	RPS      float64 // Requests / elapsed
	P50, P99 time.Duration
	Elapsed  time.Duration
}

func (r LoadResult) String() string {
	return fmt.Sprintf("%.0f req/s, p50 %v, p99 %v, %d requests, %d non-2xx, %d errors",
		r.RPS, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Requests, r.Non2xx, r.Errors)
}

// ChatRequest returns a raw keep-alive POST of a chat completion body of
// about size bytes (a system prompt filled to size and one user turn).
func ChatRequest(host string, size int, stream bool) []byte {
	body := ChatBody(size, stream)
	return []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: " + host +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
}

// ChatBody is a chat completion body of about size bytes.
func ChatBody(size int, stream bool) []byte {
	const sentence = "You are a careful assistant for a shipping company; answer with port codes and tide tables. "
	head := `{"model":"bench","stream":` + strconv.FormatBool(stream) + `,"messages":[{"role":"system","content":"`
	tail := `"},{"role":"user","content":"What is the port code of Rotterdam?"}]}`
	fill := max(size-len(head)-len(tail), 0)
	var b bytes.Buffer
	b.WriteString(head)
	for b.Len()-len(head) < fill {
		b.WriteString(sentence)
	}
	b.Truncate(len(head) + fill)
	b.WriteString(tail)
	return b.Bytes()
}

// Load runs the load and returns its result; it stops by itself (Duration
// must be positive) or when ctx ends.
func Load(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	if cfg.Conns <= 0 || cfg.Duration <= 0 || len(cfg.Request) == 0 {
		return LoadResult{}, errors.New("bench: Load needs Conns, Duration and Request")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var (
		mu      sync.Mutex
		lats    []time.Duration
		res     LoadResult
		answers int
	)
	start := time.Now()
	g := rules.NewGroup(ctx)
	for range cfg.Conns {
		g.Go("bench.load", func(ctx context.Context) {
			local := make([]time.Duration, 0, 1024)
			non2xx, errs := 0, 0
			defer func() {
				mu.Lock()
				lats = append(lats, local...)
				res.Non2xx += non2xx
				res.Errors += errs
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				n, e := oneConn(ctx, cfg, &local, &non2xx, func() bool {
					mu.Lock()
					defer mu.Unlock()
					answers++
					return cfg.Requests > 0 && answers >= cfg.Requests
				})
				errs += e
				if n < 0 { // the count is reached
					cancel()
					return
				}
				if e > 0 {
					//saltus:allow R2 a load-generator goroutine, not a loop, backing off from a dead target: there is no event to wait for
					time.Sleep(10 * time.Millisecond) // do not spin on a dead target
				}
			}
		})
	}
	<-ctx.Done()
	g.Stop()
	_ = g.Wait(context.Background()) // every connection has a deadline
	res.Elapsed = time.Since(start)
	res.Requests = len(lats)
	if res.Requests > 0 {
		slices.Sort(lats)
		res.P50, res.P99 = rank(lats, 0.50), rank(lats, 0.99)
		res.RPS = float64(res.Requests) / res.Elapsed.Seconds()
	}
	if res.Requests == 0 && res.Errors > 0 {
		return res, fmt.Errorf("bench: no answer from %s (%d connection errors)", cfg.Target, res.Errors)
	}
	return res, nil
}

// oneConn runs requests on one connection until ctx ends or it fails; it
// returns -1 when done() says the count is reached, and the errors seen.
func oneConn(ctx context.Context, cfg LoadConfig, lats *[]time.Duration, non2xx *int, done func() bool) (int, int) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", cfg.Target)
	if err != nil {
		if ctx.Err() != nil {
			return 0, 0
		}
		return 0, 1
	}
	defer c.Close()
	if cfg.TLS != nil {
		tc := tls.Client(c, cfg.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			return 0, errIfLive(ctx)
		}
		c = tc
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) }) // unblocks a pending read
	defer stop()
	br := bufio.NewReaderSize(c, 64<<10)
	for ctx.Err() == nil {
		t0 := time.Now()
		if _, err := c.Write(cfg.Request); err != nil {
			return 0, errIfLive(ctx)
		}
		status, err := readAnswer(br)
		if err != nil {
			return 0, errIfLive(ctx)
		}
		*lats = append(*lats, time.Since(t0))
		if status/100 != 2 {
			*non2xx++
		}
		if done() {
			return -1, 0
		}
	}
	return 0, 0
}

func errIfLive(ctx context.Context) int {
	if ctx.Err() != nil {
		return 0
	}
	return 1
}

// readAnswer reads one HTTP/1.1 answer framed by Content-Length or chunked
// encoding and returns its status.
func readAnswer(br *bufio.Reader) (int, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length, chunked := -1, false
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, _ := bytes.Cut(h, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		}
	}
	switch {
	case chunked:
		for {
			sz, err := br.ReadSlice('\n')
			if err != nil {
				return 0, err
			}
			n, err := strconv.ParseInt(string(bytes.TrimSpace(sz)), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("bad chunk size %q", sz)
			}
			if _, err := br.Discard(int(n) + 2); err != nil {
				return 0, err
			}
			if n == 0 {
				return status, nil
			}
		}
	case length >= 0:
		_, err := br.Discard(length)
		return status, err
	}
	return 0, errors.New("answer without Content-Length or chunked encoding")
}
