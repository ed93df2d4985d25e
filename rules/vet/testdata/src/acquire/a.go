package acquire

type sem struct{ n int }

func (s *sem) acquire(n int) { s.n -= n }
func (s *sem) release(n int) { s.n += n }

type pin struct{}

func (p *pin) acquire() {}
func (p *pin) release() {}

func bad(s *sem) {
	s.acquire(1) // want `R9: s.acquire is not followed at once by defer s.release`
	work()
	s.release(1)
}

func good(s *sem, p *pin) {
	s.acquire(1)
	defer s.release(1)
	work()
	//saltus:allow R9 an example: released by the hook that ends the request
	p.acquire()
}

func wrongReceiver(a, b *sem) {
	a.acquire(1) // want `R9: a.acquire is not followed at once by defer a.release`
	defer b.release(1)
}

func work() {}
