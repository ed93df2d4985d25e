package reactor

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/saltus-lb/saltus/internal/promtext"
)

func init() {
	promtext.Describe(map[string]string{
		"saltus_reactor_connections_open":           "Client connections open on the data plane's event loops.",
		"saltus_reactor_exchanges_open":             "Requests read and not yet answered in full, over all client connections.",
		"saltus_reactor_connections_accepted_total": "Client connections accepted.",
		"saltus_reactor_connections_rejected_total": "Client connections closed at accept, by reason (max_conns: over --max-conns, answered 503; draining).",
		"saltus_reactor_requests_total":             "HTTP requests framed on client connections (every method and path).",
		"saltus_reactor_framing_errors_total":       "Requests refused while framing, by the status answered (400 malformed, 413 body over --max-body, 431 head over --max-header, 501 unsupported transfer coding).",
		"saltus_reactor_timeouts_total":             "Client connections closed by a timeout, by kind (header: head not complete in time, idle: keep-alive idle, write_stall: the client stopped reading).",
		"saltus_reactor_mailbox_full_total":         "Cross-loop messages refused because the target loop's mailbox was full (or the server stopped).",
		"saltus_reactor_poster_dropped_total":       "Messages to a loop dropped because the server had stopped (the tokenizer's completions, upstream dial results).",
		"saltus_reactor_mailbox_posts_total":        "Messages posted to a loop's mailbox.",
		"saltus_reactor_mailbox_depth":              "Messages posted to each loop's mailbox and not run yet, by loop (at most reactor.Config.MailboxSize, 4,096; over it a post is refused and counted in saltus_reactor_mailbox_full_total).",
		"saltus_reactor_mailbox_wakes_total":        "Mailbox posts that had to wake an idle loop (an eventfd write through gnet Execute); the rest run as the loop leaves a callback.",
		"saltus_reactor_read_paused_total":          "Times a client connection stopped being read because the answers it owes the client exceed MaxOutboundBytes (it resumes when they drain, closes after IdleTimeout of no progress).",
		"saltus_upstream_conns":                     "Upstream (backend) connections open on the event loops.",
		"saltus_upstream_dials_total":               "Upstream connections dialed by the event loops.",
		"saltus_upstream_dial_errors_total":         "Upstream dials by the event loops that failed.",
		"saltus_upstream_tls_handshakes_total":      "TLS handshakes with https upstreams (backends), by result (ok; error: the certificate did not verify, the name did not match, the upstream does not speak TLS...; the error is logged).",
	})
}

// serverMetrics are the reactor's saltus_reactor_* series. Counters are
// atomics: any goroutine.
type serverMetrics struct {
	accepted, rejectedMaxConns, rejectedDraining   *metrics.Counter
	requests                                       *metrics.Counter
	framing400, framing413, framing431, framing501 *metrics.Counter
	timeoutHeader, timeoutIdle, timeoutWrite       *metrics.Counter
	mailboxFull, posterDropped                     *metrics.Counter
	mailboxPosts, mailboxWakes                     *metrics.Counter
	upDials, upDialErrors                          *metrics.Counter
	readPaused                                     *metrics.Counter
	upTLSOK, upTLSError                            *metrics.Counter
	upTLSThrottle                                  throttle // the upstream TLS errors' log
}

func newServerMetrics(s *Server, set *metrics.Set) *serverMetrics {
	set.GetOrCreateGauge("saltus_reactor_connections_open", func() float64 { return float64(s.conns.Load()) })
	set.GetOrCreateGauge("saltus_reactor_exchanges_open", func() float64 { return float64(s.open.Load()) })
	set.GetOrCreateGauge("saltus_upstream_conns", func() float64 { return float64(s.upConns.Load()) })
	for _, l := range s.loops {
		set.GetOrCreateGauge(fmt.Sprintf(`saltus_reactor_mailbox_depth{loop="%d"}`, l.idx), func() float64 {
			return float64(l.mail.Load())
		})
	}
	fe := func(code int) *metrics.Counter {
		return set.GetOrCreateCounter(fmt.Sprintf(`saltus_reactor_framing_errors_total{code="%d"}`, code))
	}
	to := func(kind string) *metrics.Counter {
		return set.GetOrCreateCounter(`saltus_reactor_timeouts_total{kind="` + kind + `"}`)
	}
	return &serverMetrics{
		accepted:         set.GetOrCreateCounter("saltus_reactor_connections_accepted_total"),
		rejectedMaxConns: set.GetOrCreateCounter(`saltus_reactor_connections_rejected_total{reason="max_conns"}`),
		rejectedDraining: set.GetOrCreateCounter(`saltus_reactor_connections_rejected_total{reason="draining"}`),
		requests:         set.GetOrCreateCounter("saltus_reactor_requests_total"),
		framing400:       fe(400),
		framing413:       fe(413),
		framing431:       fe(431),
		framing501:       fe(501),
		timeoutHeader:    to("header"),
		timeoutIdle:      to("idle"),
		timeoutWrite:     to("write_stall"),
		mailboxFull:      set.GetOrCreateCounter("saltus_reactor_mailbox_full_total"),
		posterDropped:    set.GetOrCreateCounter("saltus_reactor_poster_dropped_total"),
		mailboxPosts:     set.GetOrCreateCounter("saltus_reactor_mailbox_posts_total"),
		mailboxWakes:     set.GetOrCreateCounter("saltus_reactor_mailbox_wakes_total"),
		upDials:          set.GetOrCreateCounter("saltus_upstream_dials_total"),
		upDialErrors:     set.GetOrCreateCounter("saltus_upstream_dial_errors_total"),
		readPaused:       set.GetOrCreateCounter("saltus_reactor_read_paused_total"),
		upTLSOK:          set.GetOrCreateCounter(`saltus_upstream_tls_handshakes_total{result="ok"}`),
		upTLSError:       set.GetOrCreateCounter(`saltus_upstream_tls_handshakes_total{result="error"}`),
	}
}

func (m *serverMetrics) framingError(status int) {
	switch status {
	case 413:
		m.framing413.Inc()
	case 431:
		m.framing431.Inc()
	case 501:
		m.framing501.Inc()
	default:
		m.framing400.Inc()
	}
}

// gnetLogger sends gnet's own logs to slog: debug and info at debug
// level (gnet logs "Launching gnet" at info), warnings and errors
// throttled to one per 10 s each, with the count of those suppressed.
type gnetLogger struct{ log *slog.Logger }

var gnetThrottle [2]throttle // warn, error

func (l gnetLogger) Debugf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "from", "gnet")
}
func (l gnetLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "from", "gnet")
}
func (l gnetLogger) Warnf(format string, args ...any) {
	if n, ok := gnetThrottle[0].allow(); ok {
		l.log.Warn(fmt.Sprintf(format, args...), "from", "gnet", "suppressed", n)
	}
}
func (l gnetLogger) Errorf(format string, args ...any) {
	if n, ok := gnetThrottle[1].allow(); ok {
		l.log.Error(fmt.Sprintf(format, args...), "from", "gnet", "suppressed", n)
	}
}
func (l gnetLogger) Fatalf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "from", "gnet", "fatal", true)
}

// throttle lets one event through per 10 s. Any goroutine.
type throttle struct {
	last       atomic.Int64 // unix nanoseconds of the last event let through
	suppressed atomic.Int64
}

// allow reports whether to log now, and how many were suppressed since.
func (t *throttle) allow() (int64, bool) {
	now := time.Now().UnixNano()
	last := t.last.Load()
	if now-last < int64(10*time.Second) || !t.last.CompareAndSwap(last, now) {
		t.suppressed.Add(1)
		return 0, false
	}
	return t.suppressed.Swap(0), true
}
