;;; sparkls-nextedit.el --- Predicted next edits -*- lexical-binding: t -*-

;; Copyright (C) 2025 the sparkls authors
;; SPDX-License-Identifier: Apache-2.0
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1") (eglot "1.9") (jsonrpc "1.0.14"))
;; Keywords: convenience, languages, tools

;; This file is not part of GNU Emacs.

;;; Commentary:

;; The sparkls language server predicts the next edit from the edits just
;; made (rename one call, and it proposes the others).
;; `sparkls-nextedit-mode' shows that prediction in place in a buffer that
;; eglot manages: when you stop typing it asks the server
;; (`sparkls/inlineEdit'), strikes through the text the prediction removes
;; and shows the text it inserts after it.  While a prediction is shown,
;; TAB applies it and C-g (or ESC ESC, any other change, or moving point
;; out of the predicted lines) dismisses it; otherwise TAB does what it
;; always does.
;;
;; An answer is shown only for the buffer text it was computed for: one
;; that comes back after the buffer changed, or after a newer request, is
;; dropped.
;;
;; Setup, once eglot runs sparkls for the buffer (docs/editors.md):
;;
;;   (require 'sparkls-nextedit)
;;   (add-hook 'eglot-managed-mode-hook #'sparkls-nextedit-follow-eglot)
;;
;; Commands: `sparkls-nextedit-request' (ask now), `sparkls-nextedit-accept',
;; `sparkls-nextedit-dismiss'.  Option: `sparkls-nextedit-idle-delay'.
;; Faces: `sparkls-nextedit-removed', `sparkls-nextedit-added'.

;;; Code:

(require 'cl-lib)
(require 'diff-mode)                    ; the faces ours inherit
(require 'eglot)
(require 'jsonrpc)

(defgroup sparkls-nextedit nil
  "Next-edit predictions from the sparkls language server."
  :group 'eglot
  :prefix "sparkls-nextedit-")

(defcustom sparkls-nextedit-idle-delay 0.5
  "Seconds without input after a change before a prediction is asked for.
nil: only when asked with `sparkls-nextedit-request'."
  :type '(choice (number :tag "Seconds") (const :tag "Only on request" nil)))

(defface sparkls-nextedit-removed
  '((t :inherit diff-removed :strike-through t))
  "Face of the text a shown prediction removes.")

(defface sparkls-nextedit-added
  '((t :inherit diff-added))
  "Face of the text a shown prediction inserts.")

(defvar sparkls-nextedit-active-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "TAB") #'sparkls-nextedit-accept)
    (define-key map [tab] #'sparkls-nextedit-accept)
    (define-key map (kbd "C-g") #'sparkls-nextedit-dismiss)
    (define-key map (kbd "ESC ESC") #'sparkls-nextedit-dismiss)
    (define-key map [escape] #'sparkls-nextedit-dismiss)
    map)
  "Keys that act on a shown prediction.
Active only while one is shown, and then before other minor modes' keys.")

(defvar-local sparkls-nextedit--active nil
  "Non-nil while this buffer shows a prediction.
It turns on `sparkls-nextedit-active-map'.")

(defvar sparkls-nextedit--emulation-alist
  (list (cons 'sparkls-nextedit--active sparkls-nextedit-active-map))
  "Our entry of `emulation-mode-map-alists'.
There TAB reaches a shown prediction before completion or snippet modes.")

(defvar-local sparkls-nextedit--shown nil
  "The prediction on display, a plist.
:server, :result (the answer), :edits (a list), :overlays, and :start and
:end, markers around the predicted lines, where point may move freely.")

(defvar sparkls-nextedit--showing nil
  "The buffer that shows a prediction (one at a time).")

(defvar-local sparkls-nextedit--timer nil
  "The idle timer that will ask for a prediction.")

(defvar-local sparkls-nextedit--generation 0
  "Counts requests and changes; an answer to an earlier one is dropped.")

(defvar-local sparkls-nextedit--unsupported nil
  "Non-nil once the server said it has no `sparkls/inlineEdit'.")

;;;###autoload
(define-minor-mode sparkls-nextedit-mode
  "Show sparkls' predicted next edit in this eglot-managed buffer.
After `sparkls-nextedit-idle-delay' seconds without input following a
change, the server is asked for the next edit; text it removes is shown
with the face `sparkls-nextedit-removed', text it inserts with
`sparkls-nextedit-added'.  While it is shown:

\\{sparkls-nextedit-active-map}
Any other change, or moving point out of the predicted lines, dismisses it."
  :lighter " Next"
  (cond
   (sparkls-nextedit-mode
    (add-to-list 'emulation-mode-map-alists 'sparkls-nextedit--emulation-alist)
    (add-hook 'after-change-functions #'sparkls-nextedit--after-change nil t))
   (t
    (remove-hook 'after-change-functions #'sparkls-nextedit--after-change t)
    (sparkls-nextedit--cancel-timer)
    (cl-incf sparkls-nextedit--generation)
    (sparkls-nextedit--clear "dismissed"))))

;;;###autoload
(defun sparkls-nextedit-follow-eglot ()
  "Turn `sparkls-nextedit-mode' on or off with eglot in this buffer.
Meant for `eglot-managed-mode-hook'."
  (sparkls-nextedit-mode (if (eglot-managed-p) 1 -1)))

;;; Asking

(defun sparkls-nextedit-request ()
  "Ask the server for the next edit around point now.
The prediction is shown when it comes."
  (interactive)
  (unless sparkls-nextedit-mode
    (user-error "`sparkls-nextedit-mode' is off in this buffer"))
  (unless (sparkls-nextedit--ask)
    (user-error "No sparkls server for this buffer")))

(defun sparkls-nextedit--ask ()
  "Send `sparkls/inlineEdit' for point; nil when there is no server."
  (sparkls-nextedit--cancel-timer)
  (let ((server (eglot-current-server)))
    (when (and server (not sparkls-nextedit--unsupported))
      (sparkls-nextedit--clear "dismissed")
      ;; The server must know the text of the version asked about.
      (eglot--signal-textDocument/didChange)
      (let ((buffer (current-buffer))
            (generation (cl-incf sparkls-nextedit--generation))
            (version eglot--versioned-identifier))
        (jsonrpc-async-request
         server :sparkls/inlineEdit
         (list :textDocument (eglot--VersionedTextDocumentIdentifier)
               :position (eglot--pos-to-lsp-position))
         :success-fn (lambda (result)
                       (sparkls-nextedit--answered
                        buffer generation version server result))
         :error-fn (lambda (err) (sparkls-nextedit--failed buffer err))
         :timeout-fn #'ignore)
        t))))

(defun sparkls-nextedit--answered (buffer generation version server result)
  "Show RESULT from SERVER in BUFFER if it is still for the buffer's text.
That is: no change or request since GENERATION, and the text is VERSION."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (let ((edits (append (plist-get result :edits) nil))
            (answered (plist-get (plist-get result :textDocument) :version)))
        (when (and sparkls-nextedit-mode
                   edits
                   (= generation sparkls-nextedit--generation)
                   (eql answered version)
                   (eql version eglot--versioned-identifier)
                   (eq buffer (window-buffer (selected-window))))
          (sparkls-nextedit--show server result edits))))))

(defun sparkls-nextedit--failed (buffer error)
  "Note ERROR of a request from BUFFER.
A server without the method is not asked again."
  (when (and (eql (plist-get error :code) -32601) (buffer-live-p buffer))
    (with-current-buffer buffer
      (setq sparkls-nextedit--unsupported t))))

(defun sparkls-nextedit--after-change (&rest _)
  "Dismiss the prediction, drop answers on the way; ask again when idle."
  (cl-incf sparkls-nextedit--generation)
  (sparkls-nextedit--clear "dismissed")
  (sparkls-nextedit--cancel-timer)
  (when (and sparkls-nextedit-idle-delay (not sparkls-nextedit--unsupported))
    (setq sparkls-nextedit--timer
          (run-with-idle-timer sparkls-nextedit-idle-delay nil
                               #'sparkls-nextedit--idle (current-buffer)))))

(defun sparkls-nextedit--idle (buffer)
  "Ask for BUFFER's prediction if it is still the one being edited."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (setq sparkls-nextedit--timer nil)
      (when (and sparkls-nextedit-mode
                 (eq buffer (window-buffer (selected-window))))
        (sparkls-nextedit--ask)))))

(defun sparkls-nextedit--cancel-timer ()
  "Cancel the idle timer, if any."
  (when (timerp sparkls-nextedit--timer)
    (cancel-timer sparkls-nextedit--timer))
  (setq sparkls-nextedit--timer nil))

;;; Showing

(defun sparkls-nextedit--regions (edits)
  "EDITS (LSP TextEdits) as (START END NEW-TEXT), in the server's order."
  (mapcar (lambda (edit)
            (let ((range (plist-get edit :range)))
              (list (eglot--lsp-position-to-point (plist-get range :start))
                    (eglot--lsp-position-to-point (plist-get range :end))
                    (or (plist-get edit :newText) ""))))
          edits))

(defun sparkls-nextedit--added-text (text)
  "TEXT as shown where it would go, with the cursor before it."
  (let ((shown (propertize text 'face 'sparkls-nextedit-added)))
    (put-text-property 0 1 'cursor t shown)
    shown))

(defun sparkls-nextedit--show (server result edits)
  "Show EDITS, of RESULT from SERVER, as overlays.
Nothing is shown when point is outside the predicted window."
  (let* ((regions (sparkls-nextedit--regions edits))
         (range (plist-get result :range))
         (start (if range
                    (eglot--lsp-position-to-point (plist-get range :start))
                  (apply #'min (mapcar #'car regions))))
         (end (if range
                  (eglot--lsp-position-to-point (plist-get range :end))
                (apply #'max (mapcar #'cadr regions)))))
    (when (<= start (point) end)
      (when (buffer-live-p sparkls-nextedit--showing)
        (with-current-buffer sparkls-nextedit--showing
          (sparkls-nextedit--clear "dismissed")))
      (setq sparkls-nextedit--shown
            (list :server server :result result :edits edits
                  :start (copy-marker start) :end (copy-marker end t)
                  :overlays (mapcar (lambda (r)
                                      (apply #'sparkls-nextedit--overlay r))
                                    regions))
            sparkls-nextedit--active t
            sparkls-nextedit--showing (current-buffer))
      (add-hook 'post-command-hook #'sparkls-nextedit--watch)
      (sparkls-nextedit--notify server (plist-get result :requestId) "shown"))))

(defun sparkls-nextedit--overlay (start end new-text)
  "An overlay showing the text from START to END replaced by NEW-TEXT."
  (let ((overlay (make-overlay start end nil t nil)))
    (overlay-put overlay 'sparkls-nextedit t)
    (overlay-put overlay 'priority 100)
    (when (< start end)
      (overlay-put overlay 'face 'sparkls-nextedit-removed))
    (unless (equal new-text "")
      (overlay-put overlay 'after-string
                   (sparkls-nextedit--added-text new-text)))
    overlay))

(defun sparkls-nextedit--clear (&optional event)
  "Take the shown prediction off the screen and return it.
When EVENT is given, tell the server the prediction was EVENT."
  (let ((shown sparkls-nextedit--shown))
    (when shown
      (setq sparkls-nextedit--shown nil
            sparkls-nextedit--active nil)
      (when (eq sparkls-nextedit--showing (current-buffer))
        (setq sparkls-nextedit--showing nil)
        (remove-hook 'post-command-hook #'sparkls-nextedit--watch))
      (mapc #'delete-overlay (plist-get shown :overlays))
      (set-marker (plist-get shown :start) nil)
      (set-marker (plist-get shown :end) nil)
      (when event
        (sparkls-nextedit--notify
         (plist-get shown :server)
         (plist-get (plist-get shown :result) :requestId) event))
      shown)))

(defun sparkls-nextedit--watch ()
  "Dismiss the shown prediction after a quit, or when the user left it.
Left: point moved out of the predicted lines, or another buffer is
selected.  Runs after each command while a prediction is shown."
  (let ((buffer sparkls-nextedit--showing))
    (if (not (buffer-live-p buffer))
        (progn (setq sparkls-nextedit--showing nil)
               (remove-hook 'post-command-hook #'sparkls-nextedit--watch))
      (with-current-buffer buffer
        (let ((shown sparkls-nextedit--shown))
          (when (or (null shown)
                    (memq this-command '(keyboard-quit keyboard-escape-quit))
                    (not (eq buffer (window-buffer (selected-window))))
                    (not (<= (plist-get shown :start) (point)
                             (plist-get shown :end))))
            (sparkls-nextedit--clear "dismissed")))))))

(defun sparkls-nextedit--notify (server request-id event)
  "Tell SERVER that the prediction REQUEST-ID was EVENT.
EVENT is \"shown\" or \"dismissed\".  A server that does not know the
notification ignores it; a failure to send it is not an error here."
  (when (and server request-id)
    (condition-case nil
        (jsonrpc-notify server :sparkls/acceptance
                        (list :requestId request-id :event event))
      (error nil))))

;;; Accepting and dismissing

(defun sparkls-nextedit-accept ()
  "Apply the shown prediction; point goes after its last edit.
Return non-nil when something was applied."
  (interactive)
  (let* ((shown (sparkls-nextedit--clear))
         (result (plist-get shown :result)))
    (cond
     ((null shown)
      (when (called-interactively-p 'interactive)
        (message "No predicted edit to accept"))
      nil)
     ((not (eql (plist-get (plist-get result :textDocument) :version)
                eglot--versioned-identifier))
      (message "The predicted edit is for an earlier text; not applied")
      nil)
     (t
      (sparkls-nextedit--apply
       (sparkls-nextedit--regions (plist-get shown :edits)))
      (when (plist-get result :command)
        (sparkls-nextedit--execute (plist-get shown :server)
                                   (plist-get result :command)))
      t))))

(defun sparkls-nextedit--apply (regions)
  "Replace each (START END NEW-TEXT) of REGIONS, as one change.
They are applied last to first, so the earlier positions still hold;
insertions at one place keep their order.  Point goes after the last."
  (let ((ordered (sort (reverse regions) (lambda (a b) (> (car a) (car b)))))
        (after nil))
    (save-restriction
      (widen)
      (atomic-change-group
        (pcase-dolist (`(,start ,end ,text) ordered)
          (goto-char start)
          (delete-region start end)
          (insert text)
          (unless after (setq after (point-marker))))))
    (when after
      (goto-char after)
      (set-marker after nil))))

(defun sparkls-nextedit--execute (server command)
  "Ask SERVER to run COMMAND, the LSP Command of an accepted prediction.
The answer is not awaited."
  (let ((arguments (plist-get command :arguments)))
    (jsonrpc-async-request
     server :workspace/executeCommand
     (append (list :command (plist-get command :command))
             (and arguments (list :arguments arguments)))
     :success-fn #'ignore :error-fn #'ignore :timeout-fn #'ignore)))

(defun sparkls-nextedit-dismiss ()
  "Take the shown prediction away without applying it."
  (interactive)
  (unless (sparkls-nextedit--clear "dismissed")
    (when (called-interactively-p 'interactive)
      (message "No predicted edit to dismiss"))))

(provide 'sparkls-nextedit)
;;; sparkls-nextedit.el ends here
