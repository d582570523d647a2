;;; emacs_nextedit.el --- drive sparkls-nextedit-mode in batch Emacs against the real server  -*- lexical-binding: t -*-
;; Loads editors/emacs/sparkls-nextedit.el into an eglot buffer, edits, and records what the mode did: the
;; prediction's overlays, TAB applying it, C-g dismissing a second one, a superseded and a stale answer dropped,
;; the notifications and the command it sent. Writes JSON to $SPARKLS_EMACS_OUT; test_emacs_nextedit.py checks it.
;; Batch Emacs never becomes idle, so a step runs the mode's idle timer itself once the change armed it.
(defvar sparkls-timeout (string-to-number (or (getenv "SPARKLS_EMACS_TIMEOUT_S") "10")))
(load (expand-file-name "driver.el" (file-name-directory load-file-name)) nil t t)  ; sparkls-step, -wait, -put, eglot
(load (getenv "SPARKLS_EMACS_PLUGIN") nil t)
(defvar sparkls-notified nil "The `sparkls/acceptance' notifications sent, oldest first.")
(defvar sparkls-executed nil "The commands sent with `workspace/executeCommand'.")
(defvar sparkls-answers nil "Each `sparkls/inlineEdit' answer once the mode handled it: (version edits overlays).")

(defun sparkls-overlays ()
  "The mode's overlays in the buffer: [line, covered text, face, after-string, its face], in buffer order."
  (let ((found (cl-remove-if-not (lambda (o) (overlay-get o 'sparkls-nextedit))
                                 (overlays-in (point-min) (point-max)))))
    (vconcat (mapcar (lambda (o)
                       (let ((after (overlay-get o 'after-string)))
                         (vector (line-number-at-pos (overlay-start o))
                                 (buffer-substring-no-properties (overlay-start o) (overlay-end o))
                                 (format "%s" (overlay-get o 'face))
                                 (and after (substring-no-properties after))
                                 (and after (format "%s" (get-text-property 0 'face after))))))
                     (sort found (lambda (a b) (< (overlay-start a) (overlay-start b))))))))

(defun sparkls-tab () (format "%s" (key-binding (kbd "TAB"))))

(defun sparkls-events (event)
  (cl-count-if (lambda (p) (equal (plist-get p :event) event)) sparkls-notified))

(defun sparkls-fire-idle-timer ()
  "Run the idle timer the last change armed (batch Emacs is never idle)."
  (unless (and (timerp sparkls-nextedit--timer) (timer--idle-delay sparkls-nextedit--timer))
    (error "the change armed no idle timer"))
  (timer-event-handler sparkls-nextedit--timer))

(defun sparkls-state (prefix)
  "Record the buffer, the overlays and what TAB runs under keys PREFIX_text, _overlays, _tab."
  (sparkls-put (intern (concat prefix "_text")) (buffer-substring-no-properties (point-min) (point-max)))
  (sparkls-put (intern (concat prefix "_overlays")) (sparkls-overlays))
  (sparkls-put (intern (concat prefix "_tab")) (sparkls-tab)))

;; What the mode sends and receives, observed at the jsonrpc boundary. Until the server adds the `command'
;; (sparkls.accepted) to its answers, this adds one, so accepting is seen to execute it.
(advice-add 'jsonrpc-notify :before
            (lambda (_conn method params)
              (when (eq method :sparkls/acceptance)
                (setq sparkls-notified (append sparkls-notified (list params))))))
(defun sparkls-answered (buffer result)
  "Record (version, number of edits, number of overlays in BUFFER) once the mode handled RESULT (nil: an error)."
  (let ((shown (with-current-buffer buffer (length (sparkls-overlays)))))  ; answers come in another buffer
    (setq sparkls-answers (append sparkls-answers (list (list (plist-get (plist-get result :textDocument) :version)
                                                              (length (plist-get result :edits)) shown))))))

(defun sparkls-with-command (result)
  "RESULT with the acceptance command the server will add (kept when it has one)."
  (if (or (null (plist-get result :requestId)) (plist-get result :command))
      result
    (append result (list :command (list :title "Accepted" :command "sparkls.accepted"
                                        :arguments (vector (plist-get result :requestId)))))))

(defun sparkls-observe (args)
  "`jsonrpc-async-request' ARGS, with inlineEdit's handlers wrapped to record each answer after the mode's."
  (pcase-let ((`(,conn ,method ,params . ,keys) args))
    (pcase method
      (:workspace/executeCommand (setq sparkls-executed (append sparkls-executed (list params))) args)
      (:sparkls/inlineEdit
       (let ((success (plist-get keys :success-fn))
             (failure (plist-get keys :error-fn))
             (keys (copy-sequence keys))
             (buffer (current-buffer)))
         (setq keys (plist-put keys :success-fn (lambda (result)
                                                  (funcall success (sparkls-with-command result))
                                                  (sparkls-answered buffer result))))
         (setq keys (plist-put keys :error-fn (lambda (error)  ; e.g. a request the server cancelled
                                                (funcall failure error)
                                                (sparkls-answered buffer nil))))
         (append (list conn method params) keys)))
      (_ args))))
(advice-add 'jsonrpc-async-request :filter-args #'sparkls-observe)

(sparkls-step "attach"
  (find-file (getenv "SPARKLS_EMACS_FILE"))
  (python-mode)
  (setq-local sparkls-nextedit-idle-delay 0.3)
  (add-hook 'eglot-managed-mode-hook #'sparkls-nextedit-follow-eglot)
  (setq sparkls-server
        (eglot (list 'python-mode) (cons 'transient default-directory) 'eglot-lsp-server
               (json-parse-string (getenv "SPARKLS_EMACS_CMD") :array-type 'list) "python"))
  (unless (sparkls-wait (lambda () (eglot-current-server))) (error "the buffer is not managed by eglot"))
  (unless (sparkls-wait (lambda () (eq (plist-get (jsonrpc-request sparkls-server :sparkls/health nil) :ok) t)))
    (error "the engine did not become ready"))
  (sparkls-put 'mode_on (and sparkls-nextedit-mode t))
  (sparkls-state "start"))

(sparkls-step "shown"  ; rename the first call's old_name: the prediction renames the others
  (goto-char (point-min))
  (search-forward "old_name(1")
  (goto-char (match-beginning 0))
  (delete-char 3)
  (insert "new")
  (sparkls-fire-idle-timer)
  (sparkls-wait (lambda () (> (length (sparkls-overlays)) 0)))
  (sparkls-state "shown")
  (sparkls-put 'shown_events (sparkls-events "shown")))

(sparkls-step "accepted"
  (sparkls-put 'accept_command (format "%s" (key-binding (kbd "TAB"))))
  (call-interactively (key-binding (kbd "TAB")))
  (sparkls-state "accepted")
  (sparkls-put 'accepted_point_line (line-number-at-pos))
  (sparkls-put 'executed (vconcat (mapcar (lambda (p) (plist-get p :command)) sparkls-executed))))

(sparkls-step "dismissed"  ; another edit, another prediction: C-g dismisses it
  (goto-char (point-min))
  (search-forward "new_name(1")
  (insert "0")
  (sparkls-fire-idle-timer)
  (sparkls-wait (lambda () (> (length (sparkls-overlays)) 0)))
  (sparkls-state "second")
  (sparkls-put 'dismiss_command (format "%s" (key-binding (kbd "C-g"))))
  (call-interactively (key-binding (kbd "C-g")))
  (sparkls-state "dismissed")
  (sparkls-put 'dismissed_events (sparkls-events "dismissed")))

(sparkls-step "superseded"  ; two requests at once: only the newer answer is shown
  (let ((shown (sparkls-events "shown"))
        (answers (length sparkls-answers)))
    (sparkls-nextedit-request)
    (sparkls-nextedit-request)
    (sparkls-wait (lambda () (= (length sparkls-answers) (+ answers 2))))
    (sparkls-put 'superseded_answers (vconcat (mapcar #'vconcat (nthcdr answers sparkls-answers))))
    (sparkls-put 'superseded_overlays (sparkls-overlays))
    (sparkls-put 'superseded_shown_events (- (sparkls-events "shown") shown))))

(sparkls-step "left"  ; showing another buffer in the window dismisses it after the command
  (let ((dismissed (sparkls-events "dismissed"))
        (buffer (current-buffer)))
    (switch-to-buffer (get-buffer-create "other"))
    (let ((this-command 'switch-to-buffer)) (run-hooks 'post-command-hook))
    (switch-to-buffer buffer)
    (sparkls-put 'left_overlays (sparkls-overlays))
    (sparkls-put 'left_dismissed_events (- (sparkls-events "dismissed") dismissed))))

(sparkls-step "stale"  ; the buffer changes before the answer comes: it is not shown
  (let ((answers (length sparkls-answers)))
    (sparkls-nextedit-request)
    (save-excursion (goto-char (point-max)) (insert "# end\n"))
    (sparkls-wait (lambda () (> (length sparkls-answers) answers)))
    (sparkls-put 'stale_answer (vconcat (car (last sparkls-answers))))
    (sparkls-put 'stale_version eglot--versioned-identifier)
    (sparkls-state "stale")))

(sparkls-step "serving"  ; the notifications the server may not know cost nothing: it still answers
  (sparkls-put 'serving_after (eq (plist-get (jsonrpc-request sparkls-server :sparkls/health nil) :ok) t)))

(sparkls-finish)
