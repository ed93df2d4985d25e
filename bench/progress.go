package bench

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress is a run's progress bar over its duration; a nil writer makes
// it do nothing.
type progress struct {
	mu    sync.Mutex
	bar   *progressbar.ProgressBar
	max   time.Duration
	label string
}

func newProgress(w io.Writer, label string, d time.Duration) *progress {
	if w == nil {
		return &progress{}
	}
	bar := progressbar.NewOptions64(int64(d/time.Second),
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(labelWidth(label)),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
	return &progress{bar: bar, max: d, label: labelWidth(label)}
}

// update shows elapsed seconds and the requests done so far. Any goroutine.
func (p *progress) update(elapsed time.Duration, requests int) {
	if p.bar == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bar.Describe(fmt.Sprintf("%s %6d req", p.label, requests))
	_ = p.bar.Set64(int64(min(elapsed, p.max) / time.Second)) // a terminal write error only loses the bar
}

func (p *progress) finish() {
	if p.bar == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.bar.Finish() // a progress bar that cannot draw loses nothing
}
