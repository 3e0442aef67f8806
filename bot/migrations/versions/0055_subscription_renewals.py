"""subscription renewals: when a subscription charge's period ends, and whether the bot
stopped its renewals

``star_payments`` gains ``renews_at`` (a subscription charge's
``subscription_expiration_date``: Telegram charges again then; ``NULL`` for a one-off
payment and for the rows before, which fall back to ``plan_until``) and
``renewal_cancelled_at`` (``/cancel_renewal`` stopped the renewals with
``editUserStarSubscription``; ``NULL``: the bot never did, or ``/renew`` turned them back
on). See ``docs/decisions/278-one-renewing-subscription-and-no-payment-shortens-a-plan.md``.

Downgrade drops the two columns: which renewals the bot stopped is forgotten (Telegram
still knows).

Revision ID: 0055_subscription_renewals
Revises: 0054_call_lease_function
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0055_subscription_renewals"
down_revision: str | None = "0054_call_lease_function"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("star_payments") as batch:
        batch.add_column(sa.Column("renews_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("renewal_cancelled_at", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("star_payments") as batch:
        batch.drop_column("renewal_cancelled_at")
        batch.drop_column("renews_at")
