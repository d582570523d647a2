;;; emacs.el --- drive Emacs (batch mode) and eglot against the real sparkls server  -*- lexical-binding: t -*-
;; Completion at point (eglot's capf), and a code action chosen and applied by eglot (the server streams the
;; edit back with workspace/applyEdit). Writes what it saw as JSON to $SPARKLS_EMACS_OUT;
;; tests/e2e/test_editors.py checks it.
(defvar sparkls-timeout (string-to-number (or (getenv "SPARKLS_EMACS_TIMEOUT_S") "60")))
(load (expand-file-name "driver.el" (file-name-directory load-file-name)) nil t t)  ; sparkls-step, -wait, -put, eglot
(setq eglot-confirm-server-initiated-edits nil)  ; apply the server's edits without asking

(defun sparkls-line-with (needle)
  (goto-char (point-min))
  (search-forward needle)
  (end-of-line))

(sparkls-step "attach"
  (find-file (getenv "SPARKLS_EMACS_FILE"))
  (python-mode)
  (let ((dir (file-name-directory (getenv "SPARKLS_EMACS_FILE"))))
    ;; Started the way the eglot manual's non-interactive form does (`eglot-ensure' waits for a command loop).
    (setq sparkls-server
          (eglot (list 'python-mode) (cons 'transient dir) 'eglot-lsp-server
                 (json-parse-string (getenv "SPARKLS_EMACS_CMD") :array-type 'list) "python")))
  (unless (sparkls-wait (lambda () (eglot-current-server))) (error "the buffer is not managed by eglot"))
  (unless (sparkls-wait (lambda ()
                          (let ((h (jsonrpc-request sparkls-server :sparkls/health nil)))
                            (sparkls-put 'health h)
                            (eq (plist-get h :ok) t))))
    (error "the engine did not become ready")))

(sparkls-step "completion"
  (sparkls-line-with (getenv "SPARKLS_EMACS_COMPLETE_AT"))
  (sparkls-put 'before (buffer-substring (line-beginning-position) (line-end-position)))
  (completion-at-point)  ; one candidate: inserted, and eglot applies its textEdit
  (sparkls-put 'after (buffer-substring (line-beginning-position) (line-end-position))))

(sparkls-step "code_action"
  (sparkls-line-with (getenv "SPARKLS_EMACS_ACTION_AT"))
  (sparkls-put 'action_before (buffer-string))
  (let* ((wanted (getenv "SPARKLS_EMACS_ACTION"))
         (titles nil)
         (last-nonmenu-event 13))  ; not a mouse event: eglot asks with `completing-read', answered here
    (cl-letf (((symbol-function 'completing-read)
               (lambda (_prompt items &rest _)
                 (setq titles (mapcar #'car items))
                 (or (cl-find-if (lambda (title) (string-search wanted title)) titles)
                     (error "no action titled %s in %S" wanted titles)))))
      (eglot-code-actions (point) (point) nil t))
    (sparkls-put 'actions (vconcat titles)))
  (sparkls-put 'action_after (buffer-string)))

(sparkls-finish)
