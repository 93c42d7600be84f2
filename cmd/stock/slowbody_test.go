package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/stock/internal/testserver"
)

// slowBodies opens n connections to addr from 127.0.0.1, each sending an
// order's headers and then its body a byte at a time, four a second, until
// the server closes it or the test ends; every other one has a buyer's
// token. It returns the connections.
func slowBodies(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := d.DialContext(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatalf("slow connection %d of %d: %v", i+1, n, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		auth := ""
		if i%2 == 0 {
			auth = "Authorization: Bearer " + testToken(t, fmt.Sprint("slow-", i)) + "\r\n"
		}
		// A write to a connection the server has already closed fails: the
		// server refused it, which is what the cap is for.
		_, _ = fmt.Fprintf(c, "POST /v1/orders HTTP/1.1\r\nHost: stock\r\nContent-Type: application/json\r\nIdempotency-Key: slow-%d\r\n%sContent-Length: 40\r\n\r\n{", i, auth)
		conns = append(conns, c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, c := range conns {
				_, _ = c.Write([]byte(" "))
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return conns
}

// fromOther GETs url over a new connection from 127.0.0.2, another client,
// within within; it returns the status, or fails the test.
func fromOther(t *testing.T, url string, within time.Duration, why string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s from 127.0.0.2 with %s: %v; want an answer within %v", url, why, err, within)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Slow request bodies from one client cannot take an instance off the
// sale: past STOCK_MAX_CONNS_PER_IP (64) its connections are closed at
// once, and a body not in within STOCK_HTTP_BODY_TIMEOUT (2s) of its
// headers is cut off with 408, the connection closed.
func TestSlowBodiesLeaveOtherClientsServed(t *testing.T) {
	dsn := testserver.Database(t)
	if err := run(context.Background(), []string{"stock", "migrate"}, env(map[string]string{"STOCK_MYSQL_DSN": dsn}), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	t.Run("300 connections, cap 256", func(t *testing.T) {
		url, log := startedLog(t, map[string]string{"STOCK_MYSQL_DSN": dsn, "STOCK_MAX_CONNS": "256"})
		slowBodies(t, strings.TrimPrefix(url, "http://"), 300)
		if code := fromOther(t, url+"/v1/stock/NOPE", time.Second, "300 slow bodies open from 127.0.0.1 and STOCK_MAX_CONNS=256"); code != http.StatusNotFound {
			t.Errorf("GET /v1/stock/NOPE = %d; want 404", code)
		}
		if !strings.Contains(log.String(), `"client":"127.0.0.1","cap":64`) {
			t.Errorf("log after 300 connections from 127.0.0.1 does not say it was refused at its cap of 64:\n%s", log.String())
		}
	})
	t.Run("4 connections, cap 4", func(t *testing.T) {
		url, _ := started(t, map[string]string{"STOCK_MYSQL_DSN": dsn, "STOCK_MAX_CONNS": "4"})
		slow := slowBodies(t, strings.TrimPrefix(url, "http://"), 4)
		sent := time.Now()
		if code := fromOther(t, url+"/v1/stock/NOPE", 3*time.Second, "4 slow bodies open from 127.0.0.1 and STOCK_MAX_CONNS=4"); code != http.StatusNotFound {
			t.Errorf("GET /v1/stock/NOPE = %d; want 404", code)
		}
		// The slow order with a token was answered 408, a problem, and its
		// connection closed.
		_ = slow[0].SetReadDeadline(sent.Add(3 * time.Second))
		br := bufio.NewReader(slow[0])
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("a body trickled for 3s: no answer (%v); want 408 within the 2s body timeout", err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "/problems/request-timeout") {
			t.Errorf("a body trickled for 3s = %d %q %s; want 408 application/problem+json request-timeout", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if n, err := br.ReadByte(); err == nil {
			t.Errorf("after the 408 the connection is open (read %q); want it closed", n)
		}
	})
}
