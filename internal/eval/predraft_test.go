package eval

import "testing"

// TestPredraftDelta: the report is the difference of two /metrics reads,
// worked out by hand here for a small example.
func TestPredraftDelta(t *testing.T) {
	before := Metrics{
		`draftd_predraft_requests_total{outcome="hit"}`:          2,
		`draftd_predraft_requests_total{outcome="miss"}`:         1,
		`draftd_predraft_answer_seconds_sum{outcome="hit"}`:      0.5,
		`draftd_predraft_answer_seconds_count{outcome="hit"}`:    2,
		`draftd_predraft_request_wait_seconds_sum`:               1,
		`draftd_predraft_request_wait_seconds_count`:             1,
		`draftd_predraft_request_wait_seconds_bucket{le="0.01"}`: 0,
		`draftd_predraft_request_wait_seconds_bucket{le="0.02"}`: 0,
		`draftd_predraft_request_wait_seconds_bucket{le="0.04"}`: 0,
		`draftd_predraft_request_wait_seconds_bucket{le="+Inf"}`: 1,
		`draftd_step_seconds_sum{kind="request"}`:                10,
		`draftd_step_seconds_count{kind="request"}`:              100,
	}
	after := Metrics{
		`draftd_predraft_requests_total{outcome="hit"}`:          5, // +3
		`draftd_predraft_requests_total{outcome="partial_hit"}`:  1, // +1
		`draftd_predraft_requests_total{outcome="miss"}`:         5, // +4
		`draftd_predraft_requests_total{outcome="none"}`:         2, // +2
		`draftd_predraft_answer_seconds_sum{outcome="hit"}`:      0.503,
		`draftd_predraft_answer_seconds_count{outcome="hit"}`:    5,
		`draftd_predraft_request_wait_seconds_sum`:               1.045, // +0.045 over 3
		`draftd_predraft_request_wait_seconds_count`:             4,
		`draftd_predraft_request_wait_seconds_bucket{le="0.01"}`: 1,
		`draftd_predraft_request_wait_seconds_bucket{le="0.02"}`: 3,
		`draftd_predraft_request_wait_seconds_bucket{le="0.04"}`: 3,
		`draftd_predraft_request_wait_seconds_bucket{le="+Inf"}`: 4,
		`draftd_step_seconds_sum{kind="request"}`:                13, // +3 over 60
		`draftd_step_seconds_count{kind="request"}`:              160,
		`draftd_step_seconds_sum{kind="background"}`:             0.2, // 0.2 over 8
		`draftd_step_seconds_count{kind="background"}`:           8,
	}
	p := PredraftDelta(before, after)
	if p == nil {
		t.Fatal("nil report")
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if d := got - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s %g; want %g", name, got, want)
		}
	}
	if p.Hits != 3 || p.PartialHits != 1 || p.Misses != 4 || p.None != 2 {
		t.Errorf("outcomes %d/%d/%d/%d; want 3/1/4/2", p.Hits, p.PartialHits, p.Misses, p.None)
	}
	near("hit rate", p.HitRate, 0.4)
	near("hit answer ms", p.HitAnswerMS, 1)
	if p.WaitedRequests != 3 {
		t.Errorf("waited requests %d; want 3", p.WaitedRequests)
	}
	near("wait ms", p.WaitMS, 15)
	near("wait max bucket ms", p.WaitMaxBucketMS, 20)
	near("request step ms", p.RequestStepMS, 50)
	near("background step ms", p.BackgroundStepMS, 25)

	// A wait above every finite bucket has no bound but +Inf: -1.
	after[`draftd_predraft_request_wait_seconds_bucket{le="+Inf"}`] = 5
	after[`draftd_predraft_request_wait_seconds_count`] = 5
	if p := PredraftDelta(before, after); p.WaitMaxBucketMS != -1 {
		t.Errorf("wait beyond the buckets: max bucket %g; want -1", p.WaitMaxBucketMS)
	}
}
