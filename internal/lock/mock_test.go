package lock

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redismock/v9"
)

// Unit tests of the command sequences and of replies a live server cannot be
// made to send on demand. None of them may ever be taken for "acquired".

const mockName = "stock:{SKU-1}"

func mockClient(t *testing.T) (*Client, redismock.ClientMock) {
	t.Helper()
	db, mock := redismock.NewClientMock()
	c := New(db, WithClientID("cid"))
	t.Cleanup(func() {
		_ = c.Close()
		_ = db.Close()
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Error(err)
		}
	})
	return c, mock
}

func expectAcquire(mock redismock.ClientMock, owner string, inLine int64) *redismock.ExpectedCmd {
	return mock.ExpectEvalSha(acquireScript.Hash(), []string{mockName, "redisson_lock_token:stock:{SKU-1}",
		"golock_line:stock:{SKU-1}", "golock_line_deadline:stock:{SKU-1}"}, int64(30000), owner, inLine)
}

// expectRelease expects the release of owner's chain with fencing token
// fence (0: unknown, an undo), at count want.
func expectRelease(mock redismock.ClientMock, owner string, fence, want int64) *redismock.ExpectedCmd {
	return mock.ExpectEvalSha(releaseScript.Hash(),
		[]string{mockName, "redisson_lock__channel:stock:{SKU-1}", "redisson_unlock_latch:stock:{SKU-1}:" + strconv.FormatInt(fence, 10),
			"redisson_lock_queue:stock:{SKU-1}", "redisson_lock_timeout:stock:{SKU-1}"},
		int64(30000), owner, want, int64(10000))
}

func TestMockLockUnlockSequence(t *testing.T) {
	c, mock := mockClient(t)
	expectAcquire(mock, "cid:1", 1000).SetVal([]any{int64(7)})
	mock.ExpectEvalSha(reenterScript.Hash(), []string{mockName}, int64(30000), "cid:1", int64(1)).SetVal(int64(2))
	expectRelease(mock, "cid:1", 7, 2).SetVal(int64(1))
	expectRelease(mock, "cid:1", 7, 1).SetVal(int64(2))

	ctx := context.Background()
	h, err := c.Mutex(mockName).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock = %v", err)
	}
	if h.Fence() != 7 {
		t.Fatalf("Fence() = %d; want 7", h.Fence())
	}
	h2, err := c.Mutex(mockName).Lock(h.Context())
	if err != nil {
		t.Fatalf("re-entry = %v", err)
	}
	if err := h2.Unlock(ctx); err != nil {
		t.Fatalf("partial Unlock = %v", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("full Unlock = %v", err)
	}
}

func TestMockBusyIsNotAcquired(t *testing.T) {
	c, mock := mockClient(t)
	expectAcquire(mock, "cid:1", 0).SetVal([]any{int64(1234), int64(-1)})
	h, err := c.Mutex(mockName).TryLock(context.Background(), 0, 0)
	if h != nil || !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock on a busy reply = %v, %v; want nil, ErrNotObtained", h, err)
	}
}

// Replies of the wrong shape, and errors after the script may have run: each
// returns an error, no hold, and undoes a possible acquire.
func TestMockBadRepliesAreNotAcquired(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(*redismock.ExpectedCmd)
	}{
		{"string reply", func(e *redismock.ExpectedCmd) { e.SetVal("OK") }},
		{"nil reply", func(e *redismock.ExpectedCmd) { e.RedisNil() }},
		{"empty array", func(e *redismock.ExpectedCmd) { e.SetVal([]any{}) }},
		{"array of string", func(e *redismock.ExpectedCmd) { e.SetVal([]any{"7"}) }},
		{"timeout after the script ran", func(e *redismock.ExpectedCmd) { e.SetErr(timeoutErr{}) }},
		{"script error", func(e *redismock.ExpectedCmd) { e.SetErr(errors.New("ERR Error running script")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, mock := mockClient(t)
			tc.reply(expectAcquire(mock, "cid:1", 1000))
			expectRelease(mock, "cid:1", 0, 1).SetVal(int64(0))
			h, err := c.Mutex(mockName).TryLock(context.Background(), time.Second, 0)
			if h != nil || err == nil {
				t.Fatalf("TryLock with %s = %v, %v; want no hold and an error", tc.name, h, err)
			}
			if errors.Is(err, ErrNotObtained) {
				t.Fatalf("TryLock with %s = %v; want a Redis error, not ErrNotObtained", tc.name, err)
			}
		})
	}
}

func TestMockReleaseErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply func(*redismock.ExpectedCmd)
		want  error
	}{
		{"not held", func(e *redismock.ExpectedCmd) { e.SetVal(int64(0)) }, ErrNotHeld},
		{"timeout", func(e *redismock.ExpectedCmd) { e.SetErr(timeoutErr{}) }, timeoutErr{}},
		{"wrong type", func(e *redismock.ExpectedCmd) { e.SetVal("OK") }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, mock := mockClient(t)
			expectAcquire(mock, "cid:1", 1000).SetVal([]any{int64(1)})
			tc.reply(expectRelease(mock, "cid:1", 1, 1))
			h, err := c.Mutex(mockName).Lock(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			err = h.Unlock(context.Background())
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Unlock with %s = %v; want %v", tc.name, err, tc.want)
			}
			if cause := context.Cause(h.Context()); !errors.Is(cause, ErrLockLost) {
				t.Fatalf("hold ctx cause after a failed Unlock = %v; want ErrLockLost", cause)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
