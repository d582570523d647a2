;;; driver.el --- what the Emacs driver scripts share  -*- lexical-binding: t -*-
;; Loaded by emacs.el and emacs_nextedit.el (relative to their `load-file-name'), each after it set
;; `sparkls-timeout' (its own default): eglot, the result written as JSON to $SPARKLS_EMACS_OUT, the steps,
;; waiting for the server, the initialization options from $SPARKLS_EMACS_OPTIONS, and the end.
(unless (require 'eglot nil t)  ; built in from Emacs 29; Debian's elpa-eglot on 28
  (package-initialize)
  (require 'eglot))
(require 'json)
(require 'cl-lib)

(defvar sparkls-timeout)  ; seconds `sparkls-wait' waits, set by the script
(defvar sparkls-out (getenv "SPARKLS_EMACS_OUT"))
(defvar sparkls-result (list (cons 'steps [])))
(defvar sparkls-server nil "The eglot server the script started.")

(defun sparkls-save ()
  (with-temp-file sparkls-out (insert (json-encode sparkls-result))))

(defun sparkls-put (key value)
  (setf (alist-get key sparkls-result) value)
  (sparkls-save))

(defun sparkls-wait (pred)
  "Process events until PRED is true or the timeout passes; PRED's last value."
  (let ((deadline (+ (float-time) sparkls-timeout)))
    (while (and (not (funcall pred)) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (funcall pred)))

(defmacro sparkls-step (name &rest body)
  `(let ((err (condition-case e (progn ,@body nil) (error (format "%S" e)))))
     (sparkls-put 'steps (vconcat (alist-get 'steps sparkls-result)
                                  (list (list (cons 'name ,name) (cons 'ok (if err :json-false t))
                                              (cons 'error err)))))))

(cl-defmethod eglot-initialization-options ((_ eglot-lsp-server))
  (json-parse-string (getenv "SPARKLS_EMACS_OPTIONS") :object-type 'plist))

(defun sparkls-finish ()
  "Mark the result done, shut the server down and leave Emacs."
  (sparkls-put 'done t)
  (when sparkls-server (ignore-errors (eglot-shutdown sparkls-server)))
  (kill-emacs 0))
