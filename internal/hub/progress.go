// progress.go draws one line per downloading file: bytes, rate and ETA,
// redrawn at most every 200 ms. It is only used when Client.Progress is set
// (a terminal); it never decides whether to draw.

package hub

import (
	"fmt"
	"time"
)

type progress struct {
	w           ProgressWriter
	name        string
	total, have int64
	start, last time.Time
	startHave   int64
}

func (c *Client) newProgress(name string, total, have int64) *progress {
	return &progress{w: c.Progress, name: name, total: total, have: have, startHave: have, start: time.Now()}
}

func (p *progress) Write(b []byte) (int, error) {
	p.have += int64(len(b))
	if p.w != nil && time.Since(p.last) >= 200*time.Millisecond {
		p.last = time.Now()
		p.draw()
	}
	return len(b), nil
}

func (p *progress) draw() {
	el := time.Since(p.start).Seconds()
	rate := float64(p.have-p.startHave) / max(el, 1e-3)
	eta := "--"
	if rate > 0 {
		eta = (time.Duration(float64(p.total-p.have)/rate) * time.Second).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "\r%-32s %8.1f / %.1f MB  %6.1f MB/s  ETA %-8s", p.name, float64(p.have)/1e6, float64(p.total)/1e6, rate/1e6, eta)
}

func (p *progress) done() {
	if p.w != nil {
		p.draw()
		fmt.Fprintln(p.w)
	}
}
