package kube

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The parts of discovery.k8s.io/v1 objects the watcher reads; the rest of
// each object is skipped by encoding/json.

type objectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
}

type endpointSlice struct {
	Metadata    objectMeta     `json:"metadata"`
	AddressType string         `json:"addressType"`
	Endpoints   []endpoint     `json:"endpoints"`
	Ports       []endpointPort `json:"ports"`
}

type endpoint struct {
	Addresses  []string `json:"addresses"`
	Conditions struct {
		// Ready: nil means ready ("consumers should interpret this
		// unknown state as ready", the API's field doc).
		Ready *bool `json:"ready"`
		// Terminating: nil means not terminating.
		Terminating *bool `json:"terminating"`
	} `json:"conditions"`
	Hostname  *string `json:"hostname"`
	TargetRef *struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	} `json:"targetRef"`
}

type endpointPort struct {
	Name     *string `json:"name"`
	Port     *int32  `json:"port"`
	Protocol *string `json:"protocol"`
}

type sliceList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items []endpointSlice `json:"items"`
}

// apiStatus is a metav1.Status: an error answer's body, or an ERROR
// watch event's object.
type apiStatus struct {
	Kind    string `json:"kind"`
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// gone reports whether s says the resourceVersion is too old (410 Gone,
// reason Expired or Gone): the watcher must list again.
func (s *apiStatus) gone() bool {
	return s.Code == 410 || s.Reason == "Expired" || s.Reason == "Gone"
}

// Event types, in the order of the events_total label values.
const (
	evAdded = iota
	evModified
	evDeleted
	evBookmark
	evError
	numEventTypes
)

var eventTypeNames = [numEventTypes]string{"added", "modified", "deleted", "bookmark", "error"}

// event is one decoded watch event.
type event struct {
	typ    int
	rv     string         // the object's resourceVersion; "" for ERROR
	slice  *endpointSlice // ADDED, MODIFIED, DELETED
	status *apiStatus     // ERROR
}

// decodeEvent decodes one watch event line ({"type":...,"object":{...}}).
// Every event but ERROR carries an object with a resourceVersion, and
// every slice a name, or it is an error: the watcher cannot apply it and
// must list again.
func decodeEvent(line []byte) (event, error) {
	var raw struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal(line, &raw); err != nil {
		return event{}, fmt.Errorf("bad watch event: %w", err)
	}
	var ev event
	switch raw.Type {
	case "ADDED":
		ev.typ = evAdded
	case "MODIFIED":
		ev.typ = evModified
	case "DELETED":
		ev.typ = evDeleted
	case "BOOKMARK":
		ev.typ = evBookmark
	case "ERROR":
		ev.typ = evError
	default:
		return event{}, fmt.Errorf("bad watch event: unknown type %.40q", raw.Type)
	}
	if len(raw.Object) == 0 || raw.Object[0] != '{' {
		return event{}, fmt.Errorf("bad watch event: %s without an object", raw.Type)
	}
	if ev.typ == evError {
		var st apiStatus
		if err := json.Unmarshal(raw.Object, &st); err != nil {
			return event{}, fmt.Errorf("bad watch event: ERROR object: %w", err)
		}
		ev.status = &st
		return ev, nil
	}
	var s endpointSlice
	if err := json.Unmarshal(raw.Object, &s); err != nil {
		return event{}, fmt.Errorf("bad watch event: %s object: %w", raw.Type, err)
	}
	if s.Metadata.ResourceVersion == "" {
		return event{}, fmt.Errorf("bad watch event: %s object without metadata.resourceVersion", raw.Type)
	}
	ev.rv = s.Metadata.ResourceVersion
	if ev.typ == evBookmark {
		return ev, nil // a bookmark's object is an empty EndpointSlice but for its resourceVersion
	}
	if s.Metadata.Name == "" {
		return event{}, fmt.Errorf("bad watch event: %s EndpointSlice without metadata.name", raw.Type)
	}
	ev.slice = &s
	return ev, nil
}

// errLineTooLong: a watch event over the bound.
var errLineTooLong = errors.New("watch event over the size bound")

// lineReader splits a watch stream into event lines. The API server
// writes each event as one line of JSON (apimachinery's JSON serializer
// frames objects with newlines); a line over max is errLineTooLong, and
// a stream that ends inside a line io.ErrUnexpectedEOF: the event is
// dropped and the watch resumed from the last whole one, so nothing is
// lost.
type lineReader struct {
	br  *bufio.Reader
	acc []byte // a line longer than br's buffer, being joined
	max int
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its newline; valid until the next
// call.
func (l *lineReader) next() ([]byte, error) {
	if cap(l.acc) > 1<<20 {
		l.acc = nil // one huge event does not pin its memory for the watch's life
	}
	l.acc = l.acc[:0]
	for {
		b, err := l.br.ReadSlice('\n')
		if len(l.acc)+len(b) > l.max+1 { // +1: the newline
			return nil, errLineTooLong
		}
		switch err {
		case nil:
			if len(l.acc) == 0 {
				return b[:len(b)-1], nil
			}
			l.acc = append(l.acc, b...)
			return l.acc[:len(l.acc)-1], nil
		case bufio.ErrBufferFull:
			l.acc = append(l.acc, b...)
		case io.EOF:
			if len(l.acc)+len(b) == 0 {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// Target is one ready endpoint of a watch: a backend.
type Target struct {
	// Name names the endpoint stably across restarts and routers: its
	// pod's name (targetRef), else its hostname, else its address; made
	// to fit a backend name (1 to 64 of letters, digits, '.', '_' and
	// '-', not "backend-<digits>", see backend.CheckName): other
	// characters become '-' (an IPv6 address "fd00::1" is "fd00--1"), a
	// longer name keeps its first 55 characters and a hash of the whole,
	// and "backend-7" becomes "backend-7.NAMESPACE".
	Name string `json:"name"`
	// URL is "http://IP:port" (an IPv6 address bracketed), or
	// "http://host:port" for an FQDN slice.
	URL string `json:"url"`
	// Models are the models the endpoint is pinned to: a model selector's
	// watch's model (Config.ModelSelectors); nil for the Service's watch
	// (the endpoint serves what its GET /v1/models lists).
	Models []string `json:"models,omitempty"`
}

// Endpoint states, the saltus_discovery_k8s_endpoints label values.
const (
	stReady = iota
	stNotReady
	stTerminating
	stUnusable
	numStates
)

var stateNames = [numStates]string{"ready", "not_ready", "terminating", "unusable"}

// sliceView is what the watcher keeps of a slice: its ready targets and
// how many endpoints it left out, by state.
type sliceView struct {
	targets []Target
	counts  [numStates]int // counts[stReady] == len(targets)
}

// summarize picks the slice's port (named portName, else its only or
// first TCP port) and its ready endpoints' targets; namespace names the
// reserved-name suffix. An endpoint that is ready (or unknown) and not
// terminating, with a valid first address, is a target; the API says
// clients may use the first address only (the others are fungible).
func summarize(s *endpointSlice, portName, namespace string) sliceView {
	var v sliceView
	port := slicePort(s.Ports, portName)
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		switch {
		case e.Conditions.Terminating != nil && *e.Conditions.Terminating:
			v.counts[stTerminating]++
			continue
		case e.Conditions.Ready != nil && !*e.Conditions.Ready:
			v.counts[stNotReady]++
			continue
		}
		host, ok := "", port > 0 && len(e.Addresses) > 0
		if ok {
			host, ok = endpointHost(s.AddressType, e.Addresses[0])
		}
		if !ok {
			v.counts[stUnusable]++
			continue
		}
		name := e.Addresses[0]
		if e.TargetRef != nil && e.TargetRef.Kind == "Pod" && e.TargetRef.Name != "" {
			name = e.TargetRef.Name
		} else if e.Hostname != nil && *e.Hostname != "" {
			name = *e.Hostname
		}
		v.targets = append(v.targets, Target{
			Name: backendName(name, namespace),
			URL:  "http://" + host + ":" + strconv.Itoa(port),
		})
	}
	v.counts[stReady] = len(v.targets)
	return v
}

// slicePort returns the port targets use, or 0 when the slice has none
// that fits: the TCP port named name, or with name "" the first TCP port.
// A nil port means "all ports" in the API, which gives no number to dial.
func slicePort(ports []endpointPort, name string) int {
	for _, p := range ports {
		if p.Protocol != nil && *p.Protocol != "TCP" {
			continue
		}
		if name != "" && (p.Name == nil || *p.Name != name) {
			continue
		}
		if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
			return 0
		}
		return int(*p.Port)
	}
	return 0
}

// endpointHost returns addr as a URL host for the slice's address type:
// an IP in canonical form (IPv6 bracketed), or a DNS name.
func endpointHost(addressType, addr string) (string, bool) {
	switch addressType {
	case "IPv4", "IPv6":
		ip, err := netip.ParseAddr(addr)
		if err != nil || ip.Zone() != "" || ip.Is4() != (addressType == "IPv4") || ip.IsUnspecified() {
			return "", false
		}
		if ip.Is6() {
			return "[" + ip.String() + "]", true
		}
		return ip.String(), true
	case "FQDN":
		addr = strings.TrimSuffix(addr, ".")
		if len(addr) == 0 || len(addr) > 253 {
			return "", false
		}
		for label := range strings.SplitSeq(addr, ".") {
			if label == "" || checkLabel(strings.ToLower(label), false) != nil {
				return "", false
			}
		}
		return addr, true
	}
	return "", false
}

// maxNameLen is backend.CheckName's bound.
const maxNameLen = 64

// backendName makes s fit a backend name (Target.Name says how).
func backendName(s, namespace string) string {
	b := []byte(s)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if rest, ok := strings.CutPrefix(string(b), "backend-"); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
		b = append(append(b, '.'), namespace...)
	}
	if len(b) > maxNameLen {
		h := fnv.New32a()
		h.Write([]byte(s)) // a hash.Hash's Write never fails
		b = fmt.Appendf(b[:maxNameLen-9], "-%08x", h.Sum32())
	}
	if len(b) == 0 {
		return "-"
	}
	return string(b)
}

// mergeTargets returns every view's targets, sorted by name, one per URL
// and one per name. The same endpoint in two slices (while the controller
// moves it) is one target; a pod in two slices of a dual-stack Service
// (an IPv4 and an IPv6 one) is one target too, the smaller URL: its IPv4
// address.
func mergeTargets(views map[string]sliceView) []Target {
	var all []Target
	for _, v := range views {
		all = append(all, v.targets...)
	}
	slices.SortFunc(all, func(a, b Target) int {
		return cmpTargets(a.URL, a.Name, b.URL, b.Name)
	})
	all = slices.CompactFunc(all, func(a, b Target) bool { return a.URL == b.URL })
	slices.SortFunc(all, func(a, b Target) int {
		return cmpTargets(a.Name, a.URL, b.Name, b.URL)
	})
	all = slices.CompactFunc(all, func(a, b Target) bool { return a.Name == b.Name })
	if all == nil {
		all = []Target{}
	}
	return all
}

func cmpTargets(a1, a2, b1, b2 string) int {
	if c := strings.Compare(a1, b1); c != 0 {
		return c
	}
	return strings.Compare(a2, b2)
}
