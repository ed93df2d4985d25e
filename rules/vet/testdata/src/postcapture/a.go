package postcapture

type loops struct{}

func (loops) Post(i int, fn func()) bool { fn(); return true }

var shared []byte

func use([]byte)  {}
func useS(string) {}

func bad(l loops, body []byte) {
	l.Post(0, func() { use(body) }) // want `R7: a closure posted to a loop captures the byte slice body`
}

func good(l loops, body []byte) {
	s := string(body)
	kept := append([]byte(nil), body...)
	//saltus:allow R7 an example: kept is this function's own copy
	l.Post(0, func() { useS(s); use(kept) })
	l.Post(1, func() {
		own := []byte("x")
		use(own)
		use(shared)
	})
}
