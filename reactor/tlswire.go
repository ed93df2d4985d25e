package reactor

import (
	"crypto/tls"
	"net"
	"slices"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// tlsWire is a TLS connection whose records the event loop reads and
// writes (a client connection of the TLS listener, or an https upstream):
// the handshake runs off the loop, on the goroutine that accepted or
// dialed the socket, through the socket itself; then gnet enrolls the
// socket on a loop, and the loop decrypts what gnet read (decrypt) and
// encrypts what it writes (write), with the same crypto/tls.Conn.
//
// It is the net.Conn under that tls.Conn. Before the loop has it (gc
// nil), it is the socket. On the loop, Read takes the ciphertext gnet
// buffered and, once that is used, answers errWouldBlock, a temporary
// net.Error: crypto/tls then returns from Read with its state intact (a
// partial record stays in its buffer) instead of failing the connection.
// Write stages the records in the loop's buffer (Loop.tlsOut), handed to
// gnet with one write when the call that made them returns (flush): one
// system call per answer, as on a plain connection, however many records
// it takes. A record costs its AEAD seal (a few µs for 16 KiB with
// AES-NI), inside the loop's budget.
type tlsWire struct {
	tc           *tls.Conn
	nc           net.Conn  // the socket until the loop has it
	gc           gnet.Conn // the socket on the loop; set by the loop in OnOpen
	out          *[]byte   // the loop's staging buffer (Loop.tlsOut); set with gc
	laddr, raddr net.Addr
}

// newServerWire and newClientWire wrap nc, a socket, for a handshake as
// the server or the client. Any goroutine.
func newServerWire(nc net.Conn, cfg *tls.Config) *tlsWire {
	w := &tlsWire{nc: nc, laddr: nc.LocalAddr(), raddr: nc.RemoteAddr()}
	w.tc = tls.Server(w, cfg)
	return w
}

func newClientWire(nc net.Conn, cfg *tls.Config) *tlsWire {
	w := &tlsWire{nc: nc, laddr: nc.LocalAddr(), raddr: nc.RemoteAddr()}
	w.tc = tls.Client(w, cfg)
	return w
}

// attach hands the wire to gc's loop: from now on only the loop uses it.
// Loop only (OnOpen).
func (w *tlsWire) attach(gc gnet.Conn, ls *Loop) {
	w.gc, w.out, w.nc = gc, &ls.tlsOut, nil
}

// errWouldBlock is the wire's Read on the loop when gnet's buffer is
// used up: temporary, so crypto/tls keeps the connection usable.
var errWouldBlock net.Error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "reactor: no more TLS bytes buffered" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// Read is crypto/tls's read of the socket. The handshake's goroutine, then
// the loop.
func (w *tlsWire) Read(p []byte) (int, error) {
	if w.gc == nil {
		return w.nc.Read(p)
	}
	if w.gc.InboundBuffered() == 0 {
		return 0, errWouldBlock
	}
	return w.gc.Read(p) // copies and discards; never an error with bytes buffered
}

// Write is crypto/tls's write of records. The handshake's goroutine, then
// the loop (staged: flush).
func (w *tlsWire) Write(p []byte) (int, error) {
	if w.gc == nil {
		return w.nc.Write(p)
	}
	*w.out = append(*w.out, p...)
	if len(*w.out) >= flushStaged { // a long answer: hand it over in parts
		w.flush()
	}
	return len(p), nil
}

// Close is crypto/tls's close of the socket: the socket's own until the
// loop has it, then nothing (gnet closes it).
func (w *tlsWire) Close() error {
	if w.gc == nil {
		return w.nc.Close()
	}
	return nil
}

func (w *tlsWire) LocalAddr() net.Addr  { return w.laddr }
func (w *tlsWire) RemoteAddr() net.Addr { return w.raddr }

// The deadlines are the socket's during the handshake; on the loop the
// loop's own timeouts apply (sweep), and crypto/tls's close_notify
// deadline has nothing to bound: a staged write never blocks.
func (w *tlsWire) SetDeadline(t time.Time) error {
	if w.gc == nil {
		return w.nc.SetDeadline(t)
	}
	return nil
}

func (w *tlsWire) SetReadDeadline(t time.Time) error {
	if w.gc == nil {
		return w.nc.SetReadDeadline(t)
	}
	return nil
}

func (w *tlsWire) SetWriteDeadline(t time.Time) error {
	if w.gc == nil {
		return w.nc.SetWriteDeadline(t)
	}
	return nil
}

// decrypt appends to dst the plaintext of every whole record gnet has
// buffered (a partial record waits in crypto/tls for the next read), and
// writes what reading them made crypto/tls answer (a TLS 1.3 KeyUpdate).
// err is the connection's end: io.EOF after the peer's close_notify, or a
// record that fails (its alert is sent); the plaintext before it is in
// dst. Loop only.
func (w *tlsWire) decrypt(dst []byte) ([]byte, error) {
	var err error
	for {
		dst = slices.Grow(dst, minPlainRoom)
		var n int
		n, err = w.tc.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err != nil {
			break
		}
	}
	w.flush()
	if err == errWouldBlock {
		return dst, nil
	}
	return dst, err
}

// minPlainRoom is the room decrypt leaves for one record's plaintext
// before each read (crypto/tls returns at most one record per Read, and
// copies what does not fit over several).
const minPlainRoom = 16 << 10

// write encrypts b as records and hands them to gnet with one write. An
// error means the connection cannot send anymore (close_notify sent, or
// a failed write before). Loop only.
func (w *tlsWire) write(b []byte) error {
	_, err := w.tc.Write(b)
	w.flush()
	return err
}

// closeNotify sends close_notify (once; later writes fail). Loop only.
func (w *tlsWire) closeNotify() {
	_ = w.tc.CloseWrite() // an error means sent already, or the connection failed
	w.flush()
}

// flush hands the staged records to gnet (which copies what the socket
// does not take at once) and lets a staging buffer grown by a long answer
// go. Loop only.
func (w *tlsWire) flush() {
	b := *w.out
	if len(b) == 0 {
		return
	}
	_, _ = w.gc.Write(b) // a failed write closes the conn; OnClose follows
	if cap(b) > maxStaged {
		*w.out = nil
		return
	}
	*w.out = b[:0]
}

// flushStaged is the staged bytes handed to gnet while a long answer is
// still being encrypted; maxStaged the staging buffer's capacity the
// loop keeps between answers.
const (
	flushStaged = 64 << 10
	maxStaged   = 256 << 10
)
