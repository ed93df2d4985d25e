package reactor

import "testing"

type partA struct{ n int }
type partB struct{ s string }

var (
	testPartA = NewPart[*partA]()
	testPartB = NewPart[*partB]()
)

func TestPart(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Listen, cfg.Loops = "127.0.0.1:0", 2
	s, err := NewServer(cfg, newTestHandler(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	loops := s.Loops()
	if len(loops) != 2 || loops[0].Index() != 0 || loops[1].Index() != 1 {
		t.Fatalf("loops %v", loops)
	}
	if testPartA.Get(loops[0]) != nil {
		t.Fatal("a part not set is not nil")
	}
	a0, a1 := &partA{0}, &partA{1}
	testPartA.Set(loops[0], a0)
	testPartA.Set(loops[1], a1)
	testPartB.Set(loops[1], &partB{"b"})
	if testPartA.Get(loops[0]) != a0 || testPartA.Get(loops[1]) != a1 {
		t.Fatal("a part is not the one set on its loop")
	}
	if testPartB.Get(loops[0]) != nil || testPartB.Get(loops[1]).s != "b" {
		t.Fatal("parts of two types mixed")
	}
	testPartA.Set(loops[0], a1) // replaces
	if testPartA.Get(loops[0]) != a1 || len(loops[0].parts) != 1 {
		t.Fatalf("Set did not replace: %d parts", len(loops[0].parts))
	}
	var zero Part[*partA]
	defer func() {
		if recover() == nil {
			t.Fatal("a Part not made by NewPart did not panic")
		}
	}()
	zero.Get(loops[0])
}
