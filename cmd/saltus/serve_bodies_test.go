package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestServeBodiesStayTheirs: request bodies come from pools and go back
// when a request ends (reactor.Request.ReleaseBody), so under concurrent
// load, with retries resending bodies and chunked uploads, every upstream
// must receive exactly the body its client sent: the echo of its hash.
func TestServeBodiesStayTheirs(t *testing.T) {
	t.Parallel()
	echo := newUpstreamFunc(t, "echo", func(u *upstream, w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(b)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"sha":"%s","n":%d}`, hex.EncodeToString(sum[:]), len(b))
	})
	for _, mode := range []string{"loop"} {
		t.Run(mode, func(t *testing.T) {
			// Two dead backends beside the live one: requests hashed to
			// them are retried, their bodies sent again.
			s := startServeWith(t, []*upstream{echo}, func(c *serveConfig) {
				c.Tokenizer = ""
				c.UpstreamIO = mode
				c.Backend.MaxRetries = 2
			}, deadPort(t), deadPort(t))
			const clients, each = 8, 60
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						// 1 KB to ~70 KB: every pool class and beyond.
						pad := strings.Repeat(fmt.Sprintf("c%di%d-", c, i), 100+(c*each+i)*23%9000)
						body := chatJSON(false, "system", fmt.Sprintf("client %d", c), "user", pad)
						var rd io.Reader = strings.NewReader(body)
						if i%3 == 0 {
							rd = io.MultiReader(rd) // no length known: sent chunked
						}
						req, err := http.NewRequest("POST", "http://"+s.addr+"/v1/chat/completions", rd)
						if err != nil {
							errs <- err
							return
						}
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							errs <- err
							return
						}
						got, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						sum := sha256.Sum256([]byte(body))
						want := fmt.Sprintf(`{"sha":"%s","n":%d}`, hex.EncodeToString(sum[:]), len(body))
						if resp.StatusCode != 200 || !bytes.Equal(got, []byte(want)) {
							errs <- fmt.Errorf("client %d request %d (%d bytes): %d %s", c, i, len(body), resp.StatusCode, got)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}
