"""Browser sign-in pages, one module per page (templates in ``templates/pages/auth/``).

- :mod:`.sign_in`: password, the TOTP step, sign-out (``sign_in.html``, ``totp.html``)
- :mod:`.link`: one-time sign-in links (``link.html``, ``link_invalid.html``)
- :mod:`.mfa`: enrolling an authenticator app, upgrading a session (``mfa.html``)
- :mod:`.sessions`: what they share: cookies, CSRF before sign-in, the half-signed-in state,
  opening a session
"""
