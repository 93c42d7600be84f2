package handler

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// Check is one readiness check.
type Check struct {
	Name     string
	Required bool // false: reported, but a failure keeps the instance ready
	Fn       func(ctx context.Context) error
}

func (h *Handler) healthz(c *gin.Context) {
	writeJSON(c, http.StatusOK, gin.H{"status": "ok"})
}

func (h *Handler) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	status, ready := gin.H{}, true
	for _, chk := range h.checks {
		if err := chk.Fn(ctx); err != nil {
			status[chk.Name] = "down"
			if chk.Required {
				ready = false
			}
			continue
		}
		status[chk.Name] = "up"
	}
	if !ready {
		writeJSON(c, http.StatusServiceUnavailable, gin.H{"status": "not ready", "checks": status})
		return
	}
	writeJSON(c, http.StatusOK, gin.H{"status": "ready", "checks": status})
}
