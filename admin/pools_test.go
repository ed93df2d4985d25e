package admin

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

// fakePools is a Backends that also has pools.
type fakePools struct {
	*fakeBackends
	info PoolsInfo
}

func (f fakePools) Pools() PoolsInfo { return f.info }

func newPoolsTest(t *testing.T, info PoolsInfo, mut func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	if mut != nil {
		mut(&cfg)
	}
	s, err := New(cfg, fakePools{&fakeBackends{}, info}, &fakeRoutes{}, metrics.NewSet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A fleet of three backends: two list a base model and one of them an
// adapter of it, the third has not answered GET /v1/models yet.
var testPools = PoolsInfo{
	Pools: []PoolInfo{
		{Model: "llama3", MaxModelLen: 8192, Routable: 1, Requests: 40, Backends: []PoolMember{
			{ID: 0, Name: "gpu-a", URL: "http://10.0.0.1:8000"}, {ID: 1, URL: "http://10.0.0.2:8000"}}},
		{Model: "sql-lora", Parent: "llama3", Routable: 1, Requests: 2, Backends: []PoolMember{
			{ID: 0, Name: "gpu-a", URL: "http://10.0.0.1:8000"}}},
	},
	Unknown: []PoolMember{{ID: 2, URL: "http://10.0.0.3:8000"}},
	Backends: []BackendModels{
		{ID: 0, Name: "gpu-a", URL: "http://10.0.0.1:8000", Models: []string{"llama3", "sql-lora"}, State: "listed"},
		{ID: 1, URL: "http://10.0.0.2:8000", Models: []string{"llama3"}, State: "pinned"},
		{ID: 2, URL: "http://10.0.0.3:8000", State: "unknown", Error: "backend backend-2: connection refused"},
	},
}

func TestPools(t *testing.T) {
	t.Parallel()
	const token = "pools-token"
	s := newPoolsTest(t, testPools, func(c *Config) { c.BearerToken = token })
	auth := []string{"Authorization", "Bearer " + token}

	a := do(s, "GET", "/admin/pools", "", auth...)
	want := `{"pools":[` +
		`{"model":"llama3","parent":"","max_model_len":8192,"backends":[{"id":0,"name":"gpu-a","url":"http://10.0.0.1:8000"},{"id":1,"url":"http://10.0.0.2:8000"}],"routable":1,"requests":40},` +
		`{"model":"sql-lora","parent":"llama3","max_model_len":0,"backends":[{"id":0,"name":"gpu-a","url":"http://10.0.0.1:8000"}],"routable":1,"requests":2}],` +
		`"unknown":[{"id":2,"url":"http://10.0.0.3:8000"}],` +
		`"backends":[{"id":0,"name":"gpu-a","url":"http://10.0.0.1:8000","models":["llama3","sql-lora"],"state":"listed"},` +
		`{"id":1,"url":"http://10.0.0.2:8000","models":["llama3"],"state":"pinned"},` +
		`{"id":2,"url":"http://10.0.0.3:8000","models":[],"state":"unknown","error":"backend backend-2: connection refused"}]}` + "\n"
	if a.code != 200 || a.body != want || a.hdr.Get("Content-Type") != "application/json" {
		t.Errorf("GET /admin/pools: %d %q\n%s\nwant\n%s", a.code, a.hdr.Get("Content-Type"), a.body, want)
	}
	// The JSON reads back into the same values (the backend without
	// models aside: [] reads back as an empty slice).
	var got PoolsInfo
	if err := json.Unmarshal([]byte(a.body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Pools[0].Backends[1].ID != 1 || got.Pools[1].Parent != "llama3" || got.Pools[0].Requests != 40 || got.Unknown[0].ID != 2 ||
		got.Backends[2].Error == "" || got.Backends[0].State != "listed" {
		t.Errorf("read back: %+v", got)
	}

	if a := do(s, "GET", "/admin/pools", ""); a.code != 401 {
		t.Errorf("without the token: %d %s", a.code, a.body)
	}
	if a := do(s, "HEAD", "/admin/pools", "", auth...); a.code != 200 {
		t.Errorf("HEAD: %d", a.code)
	}
	if a := do(s, "POST", "/admin/pools", "", auth...); a.code != 405 || a.hdr.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d, Allow %q", a.code, a.hdr.Get("Allow"))
	}

	// The dashboard's data carries the same pools.
	a = do(s, "GET", "/admin/dashboard.json", "", auth...)
	var d DashboardData
	if err := json.Unmarshal([]byte(a.body), &d); err != nil {
		t.Fatal(err)
	}
	if d.Pools == nil || len(d.Pools.Pools) != 2 || d.Pools.Pools[0].Model != "llama3" || len(d.Pools.Pools[0].Backends) != 2 ||
		d.Pools.Pools[0].Routable != 1 || d.Pools.Pools[1].Parent != "llama3" || len(d.Pools.Unknown) != 1 {
		t.Errorf("dashboard.json pools: %+v", d.Pools)
	}
}

// No pool known (every backend's models unknown, or none): lists, never
// null.
func TestPoolsEmpty(t *testing.T) {
	t.Parallel()
	s := newPoolsTest(t, PoolsInfo{Pools: []PoolInfo{{Model: "m"}}}, nil)
	want := `{"pools":[{"model":"m","parent":"","max_model_len":0,"backends":[],"routable":0,"requests":0}],"unknown":[],"backends":[]}` + "\n"
	if a := do(s, "GET", "/admin/pools", ""); a.code != 200 || a.body != want {
		t.Errorf("empty pools: %d %s, want %s", a.code, a.body, want)
	}
}

// A Backends without Pools has no /admin/pools, and the dashboard's data
// no pools.
func TestPoolsAbsent(t *testing.T) {
	t.Parallel()
	s, _, _, _ := newTest(t, nil)
	if a := do(s, "GET", "/admin/pools", ""); a.code != 404 ||
		a.body != `{"error":{"message":"no admin endpoint /admin/pools","type":"not_found","code":404}}`+"\n" {
		t.Errorf("without Pools: %d %s", a.code, a.body)
	}
	if a := do(s, "GET", "/admin/dashboard.json", ""); a.code != 200 || strings.Contains(a.body, `"pools":{`) {
		t.Errorf("dashboard.json without Pools: %d %s", a.code, a.body)
	}
}
