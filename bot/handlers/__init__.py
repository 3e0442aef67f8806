"""The routers, written as the aiogram application templates write them.

* Handlers are module-level functions. What they need reaches them by name through
  aiogram's workflow data (``Dispatcher(**workflow_data)``, typed by
  :class:`bot.middlewares.context.WorkflowData`) and the middlewares' data (``user_ctx``,
  ``paste``, ``over_rate``…): ``clock``, ``ledger``, ``chat_service``, ``admin_ids``,
  ``stale_after_s`` and the rest.
* Each module's ``create_*_router(...)`` only creates its :class:`aiogram.Router` and
  registers the handlers with their filters and flags; it takes what those filters need
  (``admin_ids`` for the admin and books routers' admin filters: the webhook's check
  for a control, :meth:`bot.middlewares.rate.UpdateRateMiddleware.is_control`, runs a
  handler's own filters with the bot alone) and nothing else.
* Routers are created per app, never at import: an aiogram router attaches to one parent
  only, and the test suite builds several apps (replicas) in one process.
"""
